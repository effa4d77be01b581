import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { html, navigate, Link } from './html.js';
import { get, post, setCsrf, onLoggedOut, ApiError } from './api.js';
import { RunsPage } from './runs.js';
import { RunPage } from './run.js';

const THEME_KEY = 'openwop-theme';

function applyTheme(t) {
  const dark = t === 'dark' || (t !== 'light' && window.matchMedia('(prefers-color-scheme: dark)').matches);
  document.documentElement.dataset.theme = dark ? 'dark' : 'light';
}

function useLocation() {
  const [loc, setLoc] = useState(window.location.pathname + window.location.search);
  useEffect(() => {
    const f = () => setLoc(window.location.pathname + window.location.search);
    window.addEventListener('popstate', f);
    window.addEventListener('openwop:navigate', f);
    return () => { window.removeEventListener('popstate', f); window.removeEventListener('openwop:navigate', f); };
  }, []);
  return loc;
}

function Login({ onSession }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (ev) => {
    ev.preventDefault();
    setBusy(true); setError(null);
    try {
      const s = await post('/ui/api/login', { token: token.trim() });
      setToken('');
      // The cookie is Secure: a browser keeps it only over HTTPS or from localhost.
      try {
        await get('/ui/api/session');
      } catch (e) {
        setError('The cluster accepted the token, but this browser did not keep the session '
          + 'cookie (it is Secure): open the UI over HTTPS, or from localhost with kubectl port-forward.');
        return;
      }
      onSession(s);
    } catch (e) {
      setError(e instanceof ApiError ? e.message : String(e));
    } finally { setBusy(false); }
  };
  return html`<main class="login">
    <h1>OpenWOP runs</h1>
    <form id="login-form" onSubmit=${submit}>
      <label for="token">Kubernetes token</label>
      <p class="hint">Paste a token the cluster accepts, e.g. the output of
        <code>kubectl create token SERVICEACCOUNT -n NAMESPACE</code>. It is checked by the
        cluster and kept in an HttpOnly cookie of this site only.</p>
      <textarea id="token" rows="5" autocomplete="off" spellcheck="false"
        value=${token} onInput=${(e) => setToken(e.target.value)}></textarea>
      <button id="login" type="submit" disabled=${busy || !token.trim()}>Log in</button>
      ${error && html`<p id="login-error" class="error" role="alert">${error}</p>`}
    </form>
  </main>`;
}

function App() {
  const loc = useLocation();
  const [session, setSession] = useState(undefined);
  const [theme, setTheme] = useState(localStorage.getItem(THEME_KEY) || 'auto');
  useEffect(() => { applyTheme(theme); }, [theme]);
  useEffect(() => {
    const mq = window.matchMedia('(prefers-color-scheme: dark)');
    const f = () => applyTheme(localStorage.getItem(THEME_KEY) || 'auto');
    mq.addEventListener('change', f);
    return () => mq.removeEventListener('change', f);
  }, []);
  useEffect(() => {
    onLoggedOut(() => { setCsrf(''); setSession(null); });
    get('/ui/api/session').then((s) => { setCsrf(s.csrf); setSession(s); }).catch(() => setSession(null));
  }, []);
  const cycleTheme = () => {
    const next = { auto: 'dark', dark: 'light', light: 'auto' }[theme] || 'auto';
    localStorage.setItem(THEME_KEY, next);
    setTheme(next);
  };
  const logout = async () => {
    try { await post('/ui/api/logout'); } catch { /* the cookie is cleared either way */ }
    setCsrf(''); setSession(null);
    navigate('/ui/');
  };
  if (session === undefined) return html`<main class="loading">Loading…</main>`;
  if (session === null) return html`<${Login} onSession=${(s) => { setCsrf(s.csrf); setSession(s); }} />`;
  const path = loc.split('?')[0];
  const m = path.match(/^\/ui\/runs\/([^/]+)\/?$/);
  return html`<div class="app">
    <header class="top">
      <${Link} href="/ui/" class="brand">OpenWOP runs<//>
      <span class="spacer"></span>
      <span id="user" class="user">${session.username}</span>
      <button id="theme" class="ghost" title="Theme: ${theme}" onClick=${cycleTheme}>Theme: ${theme}</button>
      <button id="logout" class="ghost" onClick=${logout}>Log out</button>
    </header>
    ${m
      ? html`<${RunPage} key=${m[1]} runId=${decodeURIComponent(m[1])} session=${session} />`
      : html`<${RunsPage} session=${session} />`}
  </div>`;
}

applyTheme(localStorage.getItem(THEME_KEY) || 'auto');
render(html`<${App} />`, document.getElementById('app'));
