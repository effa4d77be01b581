// Builds the page into dist/ (committed: the operator embeds it, so building the operator
// needs no Node). `node build.mjs --check` rebuilds in memory and fails if dist/ differs.
import { build } from 'esbuild';
import { gzipSync, gunzipSync } from 'node:zlib';
import { readFileSync, writeFileSync, mkdirSync, existsSync, rmSync } from 'node:fs';

const check = process.argv.includes('--check');
const dir = new URL('.', import.meta.url).pathname;
const out = {};

const js = await build({
  entryPoints: [`${dir}src/main.js`], bundle: true, minify: true, format: 'esm', target: 'es2020',
  write: false, outfile: 'app.js', legalComments: 'none', charset: 'utf8',
});
out['assets/app.js'] = js.outputFiles[0].contents;
const css = await build({
  entryPoints: [`${dir}src/app.css`], bundle: true, minify: true, write: false, outfile: 'app.css', charset: 'utf8',
});
out['assets/app.css'] = css.outputFiles[0].contents;
out['index.html'] = readFileSync(`${dir}src/index.html`);

let stale = [];
for (const [name, data] of Object.entries(out)) {
  const path = `${dir}dist/${name}`;
  if (check) {
    if (!existsSync(path) || !Buffer.from(data).equals(readFileSync(path))) stale.push(name);
    // The gzip copy is checked by content (zlib builds may differ byte for byte).
    if (!existsSync(`${path}.gz`) || !gunzipSync(readFileSync(`${path}.gz`)).equals(Buffer.from(data))) stale.push(`${name}.gz`);
    continue;
  }
  mkdirSync(path.slice(0, path.lastIndexOf('/')), { recursive: true });
  writeFileSync(path, data);
  writeFileSync(`${path}.gz`, gzipSync(data, { level: 9 }));
}
if (check && stale.length) {
  console.error(`operator/ui/dist is stale (${stale.join(', ')}): run 'make ui' and commit it`);
  process.exit(1);
}
if (!check) {
  for (const [n, d] of Object.entries(out)) console.log(`dist/${n}: ${d.length} bytes`);
}
