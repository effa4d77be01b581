import { html, Link } from './html.js';
import { layout, NODE_STATES } from './model.js';

// Box height, gaps, the labels' inset, and the widths a column's boxes may take: a column is
// as wide as its widest label wants (so "completed · ai.structuredOutput" reads whole), up to
// MAX_W; a label wider than that is cut with an ellipsis and the box's title holds it whole.
const H = 40; const GX = 60; const GY = 24; const PAD = 10;
const MIN_W = 150; const MAX_W = 240;

const stateLabel = (st, typeId) => `${st}${typeId ? ` · ${typeId.replace(/^core\./, '')}` : ''}`;

// Label widths measured as the graph draws them: one hidden SVG text in the page carrying the
// graph's classes, so the font is whatever the CSS and the system resolve it to (a cut by
// character count still overflowed with a wide font). Cached: labels repeat on every render.
let probe = null;
const widths = new Map();
function textWidth(cls, s) {
  const key = `${cls} ${s}`;
  let w = widths.get(key);
  if (w !== undefined) return w;
  if (!probe) {
    const ns = 'http://www.w3.org/2000/svg';
    const svg = document.createElementNS(ns, 'svg');
    svg.setAttribute('class', 'measure');
    svg.setAttribute('aria-hidden', 'true');
    const g = document.createElementNS(ns, 'g');
    g.setAttribute('class', 'node');
    probe = document.createElementNS(ns, 'text');
    g.append(probe);
    svg.append(g);
    document.body.append(svg);
  }
  probe.setAttribute('class', cls);
  probe.textContent = s;
  w = probe.getComputedTextLength();
  if (widths.size > 5000) widths.clear();
  widths.set(key, w);
  return w;
}

// `s` whole if it fits in `max` pixels, else its longest prefix that fits with an ellipsis.
function fit(cls, s, max) {
  if (textWidth(cls, s) <= max) return s;
  const chars = Array.from(s);
  let lo = 0; let hi = chars.length - 1;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (textWidth(cls, `${chars.slice(0, mid).join('')}…`) <= max) lo = mid; else hi = mid - 1;
  }
  return `${chars.slice(0, lo).join('')}…`;
}

// The width a node's box wants for its id and for its type after the widest state word (so a
// box does not grow as the run goes on).
function wants(id, typeId) {
  const state = Math.max(...NODE_STATES.map((st) => textWidth('node-state', stateLabel(st, typeId))));
  return Math.ceil(Math.max(textWidth('node-id', id), state)) + 2 * PAD;
}

// The workflow's nodes and edges (from its definition) with each node's state from the run's
// events; nodes the events name that the definition does not (fan-out branches, sub-workflow
// children) are drawn in a row of their own under the graph. A node that started child runs
// (`core.subWorkflow`) carries a link to its child under its box, with the child's phase.
export function Graph({ def, states, selected, onSelect, children }) {
  if (!def) return html`<div class="graph loading">Loading workflow…</div>`;
  const nodes = def.nodes || [];
  const edges = def.edges || [];
  const known = new Set(nodes.map((n) => n.id));
  const extra = [...states.keys()].filter((id) => !known.has(id));
  const { pos, width, height } = layout(nodes, edges);
  const rows = height + (extra.length ? 1 : 0);
  const cols = Math.max(width, Math.min(extra.length, 6));
  extra.forEach((id, i) => pos.set(id, { x: i % 6, y: height + Math.floor(i / 6), extra: true }));
  const typeOf = new Map(nodes.map((n) => [n.id, n.typeId]));
  const colW = Array.from({ length: cols }, () => MIN_W);
  for (const [id, p] of pos) colW[p.x] = Math.min(MAX_W, Math.max(colW[p.x], wants(id, typeOf.get(id))));
  const colX = [];
  colW.reduce((x, w, i) => { colX[i] = x; return x + w + GX; }, GX / 2);
  const vw = cols ? colX[cols - 1] + colW[cols - 1] + GX / 2 : GX;
  const vh = (rows + Math.floor(Math.max(0, extra.length - 1) / 6)) * (H + GY) + GY;
  const at = (id) => { const p = pos.get(id); return { x: colX[p.x], y: GY + p.y * (H + GY), w: colW[p.x] }; };
  const box = (id, typeId, isExtra) => {
    const { x, y, w } = at(id);
    const st = states.get(id) || 'pending';
    return html`<g key=${id} class=${`node state-${st}${selected === id ? ' selected' : ''}${isExtra ? ' child' : ''}`}
        data-node-id=${id} data-state=${st} transform=${`translate(${x},${y})`}
        tabindex="0" role="button" onClick=${() => onSelect(id)}
        onKeyDown=${(e) => { if (e.key === 'Enter') onSelect(id); }}>
      <rect width=${w} height=${H} rx="6"></rect>
      <text x=${PAD} y="17" class="node-id">${fit('node-id', id, w - 2 * PAD)}</text>
      <text x=${PAD} y="32" class="node-state">${fit('node-state', stateLabel(st, typeId), w - 2 * PAD)}</text>
      <title>${id}${typeId ? ` (${typeId})` : ''}: ${st}</title>
    </g>`;
  };
  // The first child of a node under its box (the node panel lists them all).
  const childLink = (id) => {
    const kids = (children && children.get(id)) || [];
    if (!kids.length || !pos.has(id)) return null;
    const c = kids[0];
    const { x, y, w } = at(id);
    // An SVG link (inside the svg element, Preact makes the anchor in the SVG namespace).
    return html`<${Link} key=${`child-${id}`} class=${`child-run phase-${c.status}`} href=${`/ui/runs/${encodeURIComponent(c.runId)}`}
        data-node-id=${id} data-child-run-id=${c.runId} data-status=${c.status}
        transform=${`translate(${x},${y + H + 2})`}>
      <rect width=${w} height="17" rx="8"></rect>
      <text x="8" y="12">↳ child ${c.status}${kids.length > 1 ? ` (+${kids.length - 1})` : ''}</text>
      <title>child run ${c.runId}: ${c.status}</title>
    <//>`;
  };
  return html`<div class="graph">
    <svg id="graph" viewBox=${`0 0 ${vw} ${vh}`} width=${vw} height=${vh} role="img" aria-label="workflow graph">
      ${edges.filter((e) => pos.has(e.sourceNodeId) && pos.has(e.targetNodeId)).map((e) => {
        const a = at(e.sourceNodeId); const b = at(e.targetNodeId);
        const x1 = a.x + a.w; const y1 = a.y + H / 2; const x2 = b.x; const y2 = b.y + H / 2;
        const mx = (x1 + x2) / 2;
        return html`<path key=${e.id} class="edge" data-source=${e.sourceNodeId} data-target=${e.targetNodeId}
          d=${`M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`}></path>`;
      })}
      ${nodes.map((n) => box(n.id, n.typeId, false))}
      ${extra.map((id) => box(id, null, true))}
      ${[...pos.keys()].map(childLink)}
    </svg>
  </div>`;
}
