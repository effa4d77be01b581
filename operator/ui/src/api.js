// Every read and write of the page goes through the operator's REST API (/v1/...) with the
// session cookie; writes carry the session's CSRF proof. Nothing here keeps the token: the
// browser holds it in an HttpOnly cookie the page cannot read.

const CSRF_HEADER = 'X-OpenWOP-CSRF';
let csrf = '';
let onUnauthenticated = () => {};

export function setCsrf(v) { csrf = v || ''; }
export function onLoggedOut(f) { onUnauthenticated = f; }

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error;
    this.details = body && body.details;
  }
}

export async function request(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && csrf) headers[CSRF_HEADER] = csrf;
  const res = await fetch(path, {
    method,
    headers,
    credentials: 'same-origin',
    cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  const text = await res.text();
  if (text) {
    try { data = JSON.parse(text); } catch { data = { message: text }; }
  }
  if (!res.ok) {
    const err = new ApiError(res.status, data);
    if (res.status === 401 && !path.startsWith('/ui/api/login')) onUnauthenticated(err);
    throw err;
  }
  return data;
}

export const get = (p) => request('GET', p);
export const post = (p, b) => request('POST', p, b === undefined ? {} : b);

export const q = (params) => {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') s.set(k, v);
  const t = s.toString();
  return t ? `?${t}` : '';
};

export const enc = encodeURIComponent;

// A run's events over the API's SSE stream, every one of them (streamMode=debug: the
// timeline, attempts and reasoning lane read events the default `updates` mode leaves out;
// fetch, so the resume header can be set): on a dropped connection it reconnects with Last-Event-ID = the
// last sequence received, until the run's terminal event or close().
export function followEvents(runId, { onEvents, onState, isTerminal, runEnded }) {
  let closed = false;
  let lastId = null;
  let ctrl = null;
  let retryMs = 500;
  const loop = async () => {
    // The backlog in one JSON read, then the live tail over SSE from where it ended.
    try {
      const r = await request('GET', `/v1/runs/${enc(runId)}/events?streamMode=debug`);
      const evs = (r && r.events) || [];
      if (evs.length) {
        lastId = String(evs[evs.length - 1].sequence);
        onEvents(evs);
      }
      if (evs.some(isTerminal)) { onState && onState('ended'); return; }
    } catch (e) {
      if (closed || (e instanceof ApiError && e.status === 401)) return;
    }
    while (!closed) {
      ctrl = new AbortController();
      let ended = false;
      try {
        onState && onState('connecting');
        const headers = { Accept: 'text/event-stream' };
        if (lastId !== null) headers['Last-Event-ID'] = String(lastId);
        const res = await fetch(`/v1/runs/${enc(runId)}/events?streamMode=debug`, {
          headers, credentials: 'same-origin', cache: 'no-store', signal: ctrl.signal,
        });
        if (res.status === 401) { onUnauthenticated(new ApiError(401, null)); return; }
        if (!res.ok) throw new ApiError(res.status, null);
        onState && onState('live');
        retryMs = 500;
        const reader = res.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        let batch = [];
        let flushAt = 0;
        const flush = () => { if (batch.length) { onEvents(batch); batch = []; } };
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            let id = null; let data = '';
            for (const line of block.split('\n')) {
              if (line.startsWith('id:')) id = line.slice(3).trim();
              else if (line.startsWith('data:')) data += (data ? '\n' : '') + line.slice(5).replace(/^ /, '');
            }
            if (!data) continue;
            let doc;
            try { doc = JSON.parse(data); } catch { continue; }
            if (id !== null) lastId = id;
            batch.push(doc);
            if (isTerminal(doc)) ended = true;
          }
          // Deliver in batches (a 10,000-event backlog arrives in a few renders, not 10,000).
          const now = performance.now();
          if (now - flushAt > 100 || batch.length > 2000) { flush(); flushAt = now; }
        }
        flush();
      } catch (e) {
        if (closed) return;
      }
      // The server also ends the stream of a run that ended without a terminal event.
      if (ended || closed || (runEnded && runEnded())) { onState && onState('ended'); return; }
      onState && onState('reconnecting');
      await new Promise((r) => setTimeout(r, retryMs));
      retryMs = Math.min(retryMs * 2, 5000);
    }
  };
  loop();
  return { close() { closed = true; if (ctrl) ctrl.abort(); } };
}
