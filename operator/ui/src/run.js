import { useEffect, useMemo, useRef, useState, useCallback } from 'preact/hooks';
import { html, Link, duration } from './html.js';
import { get, post, q, enc, followEvents, ApiError } from './api.js';
import { Graph } from './graph.js';
import { Timeline } from './timeline.js';
import { Interrupts } from './interrupts.js';
import {
  TERMINAL_RUN_EVENTS, TERMINAL_PHASES, nodeStates, attemptsOf, reasoningOf, nodeDetails, textOf,
  childrenByNode,
} from './model.js';

const SNAPSHOT_MS = 3000;

function urlParam(name) { return new URLSearchParams(window.location.search).get(name); }

function setUrlParams(runId, node, event) {
  const s = q({ node, event });
  window.history.replaceState(null, '', `/ui/runs/${enc(runId)}${s}`);
}

export function RunPage({ runId, session }) {
  const [snap, setSnap] = useState(null);
  const [error, setError] = useState(null);
  const [events, setEvents] = useState([]);
  const [live, setLive] = useState('connecting');
  const [def, setDef] = useState(null);
  // Whether this token may answer the run's interrupts: `null` until the tenants list says, so a
  // card shows neither its buttons nor "read-only" before it is known.
  const [canUpdate, setCanUpdate] = useState(null);
  const [node, setNode] = useState(urlParam('node'));
  const [eventSeq, setEventSeq] = useState(urlParam('event') === null ? null : Number(urlParam('event')));
  const [confirming, setConfirming] = useState(false);
  const [notice, setNotice] = useState(null);
  const evRef = useRef([]);
  const snapRef = useRef(null);

  const loadSnapshot = useCallback(async () => {
    try {
      const s = await get(`/v1/runs/${enc(runId)}`);
      snapRef.current = s;
      setSnap(s);
      setError(null);
      return s;
    } catch (e) {
      setError(e instanceof ApiError && e.status === 404 ? `Run ${runId} was not found (or this token may not read it).` : e.message);
      return null;
    }
  }, [runId]);

  // The snapshot: on load, after events that change it, and now and then while the run lives.
  useEffect(() => {
    let stop = false;
    let timer;
    const tick = async () => {
      const s = await loadSnapshot();
      if (!stop && !(s && TERMINAL_PHASES.has(s.status))) timer = setTimeout(tick, SNAPSHOT_MS);
    };
    tick();
    return () => { stop = true; clearTimeout(timer); };
  }, [runId]);

  const tenant = snap && snap.owner && snap.owner.tenant;
  const workflowId = snap && snap.workflowId;
  useEffect(() => {
    if (!tenant || !workflowId) return;
    get(`/v1/workflows/${enc(workflowId)}${q({ tenantId: tenant })}`).then(setDef).catch(() => setDef({ nodes: [], edges: [] }));
    get('/v1/tenants').then((t) => {
      const mine = t.tenants.find((x) => x.tenantId === tenant);
      setCanUpdate(!!(mine && mine.canUpdateRuns));
    }).catch(() => setCanUpdate(false));
  }, [tenant, workflowId]);

  // Events: the API's SSE stream, resumed with Last-Event-ID when the connection drops.
  useEffect(() => {
    evRef.current = [];
    let refresh = null;
    const f = followEvents(runId, {
      isTerminal: (d) => TERMINAL_RUN_EVENTS.has(d.type),
      runEnded: () => !!(snapRef.current && TERMINAL_PHASES.has(snapRef.current.status)),
      onState: setLive,
      onEvents: (batch) => {
        const seen = evRef.current;
        const last = seen.length ? seen[seen.length - 1].sequence : -1;
        const fresh = batch.filter((d) => d.sequence > last);
        if (!fresh.length) return;
        evRef.current = seen.concat(fresh);
        setEvents(evRef.current);
        clearTimeout(refresh);
        refresh = setTimeout(loadSnapshot, 150);
      },
    });
    return () => { f.close(); clearTimeout(refresh); };
  }, [runId]);

  // The reasoning lane (its own stream, GET /v1/runs/{runId}/reasoning), refreshed with the
  // snapshot while the run lives.
  const [lane, setLane] = useState([]);
  useEffect(() => {
    if (!snap) return;
    get(`/v1/runs/${enc(runId)}/reasoning`).then((r) => setLane(r.entries || [])).catch(() => {});
  }, [snap && snap.status, snap && snap.metrics && snap.metrics.events]);

  const states = useMemo(() => nodeStates(events), [events]);
  const reasoning = useMemo(() => reasoningOf(lane, events), [lane, events]);
  const children = useMemo(() => childrenByNode(snap), [snap]);
  const selectNode = (n) => { setNode(n); setUrlParams(runId, n, eventSeq); };
  const selectEvent = (s) => { setEventSeq(s); setUrlParams(runId, node, s); };

  const cancel = async () => {
    setConfirming(false);
    try {
      await post(`/v1/runs/${enc(runId)}/cancel`);
      setNotice('Cancel requested.');
      loadSnapshot();
    } catch (e) { setNotice(`Cancel refused: ${e.message}`); }
  };

  const download = () => {
    const blob = new Blob([JSON.stringify(evRef.current, null, 2)], { type: 'application/json' });
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = `run-${runId}-events.json`;
    document.body.appendChild(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  };

  if (error && !snap) return html`<main class="run"><p class="error" role="alert" id="run-error">${error}</p><${Link} href="/ui/">All runs<//></main>`;
  if (!snap) return html`<main class="run loading">Loading run…</main>`;
  const terminal = TERMINAL_PHASES.has(snap.status);
  return html`<main class="run" id="run-page" data-run-id=${runId} data-status=${snap.status}>
    <div class="run-head">
      <${Link} href=${`/ui/${q({ tenant })}`} class="back">← runs<//>
      <h2 id="run-title">${workflowId}</h2>
      <span id="run-status" class=${`phase phase-${snap.status}`}>${snap.status}</span>
      <span class="meta">run ${runId} · ${tenant} · ${duration(snap.startedAt, snap.completedAt)}</span>
      <span id="live" class=${`live live-${live}`}>${live}</span>
      <span class="spacer"></span>
      <button id="download" class="ghost" onClick=${download}>Download events (${events.length})</button>
      ${canUpdate && !terminal && snap.status !== 'cancelling' && html`<button id="cancel" class="danger" onClick=${() => setConfirming(true)}>Cancel run</button>`}
    </div>
    ${snap.parentRunId && html`<p class="parent" id="parent-run">Child run of <${Link} href=${`/ui/runs/${enc(snap.parentRunId)}${q({ node: snap.parentNodeId })}`} id="parent-link"
        data-parent-run-id=${snap.parentRunId}>run ${snap.parentRunId}<//>${snap.parentNodeId ? ` (node ${snap.parentNodeId})` : ''}</p>`}
    ${snap.error && html`<p class="error" id="run-failure">${snap.error.code}: ${snap.error.message}</p>`}
    ${notice && html`<p class="notice" id="notice" role="status">${notice}</p>`}
    ${confirming && html`<div class="dialog" role="dialog" aria-modal="true" id="cancel-dialog">
      <p>Cancel run ${runId}? Running nodes are stopped; this cannot be undone.</p>
      <button id="confirm-cancel" class="danger" onClick=${cancel}>Yes, cancel the run</button>
      <button id="keep-running" class="ghost" onClick=${() => setConfirming(false)}>Keep it running</button>
    </div>`}
    <${Interrupts} runId=${runId} snapshot=${snap} events=${events} canUpdate=${canUpdate && !terminal}
      onAnswered=${() => { setNotice('Answer sent.'); loadSnapshot(); }} />
    <div class="run-body">
      <section class="graph-pane">
        <h3>Workflow</h3>
        <${Graph} def=${def} states=${states} selected=${node} onSelect=${selectNode} children=${children} />
        ${node && html`<${NodePanel} node=${node} def=${def} events=${events} children=${children.get(node) || []}
          onEvent=${selectEvent} onClose=${() => selectNode(null)} />`}
      </section>
      <section class="timeline-pane">
        <h3>Timeline <span class="count">${events.length} events</span></h3>
        <${Timeline} events=${events} selected=${eventSeq} onSelect=${selectEvent} />
        <details id="reasoning" class="reasoning">
          <summary>Reasoning (${reasoning.length})</summary>
          ${reasoning.length === 0 && html`<p class="empty">No reasoning recorded.</p>`}
          ${reasoning.map((r) => html`<div class="reasoning-item" key=${r.key} data-node-id=${r.node || ''}>
            <div class="reasoning-meta">${r.seq === null ? '' : `#${r.seq} `}${r.node || ''} · ${r.source}</div>
            <pre class="reasoning-text">${r.text}</pre>
          </div>`)}
        </details>
      </section>
    </div>
  </main>`;
}

function Value({ v }) {
  if (v === null || v === undefined) return html`<span class="empty">—</span>`;
  return html`<pre class="json">${textOf(v)}</pre>`;
}

function NodePanel({ node, def, events, children, onEvent, onClose }) {
  const d = useMemo(() => nodeDetails(events, node), [events, node]);
  const spec = def && (def.nodes || []).find((n) => n.id === node);
  const attempts = useMemo(() => attemptsOf(events, node), [events, node]);
  return html`<div id="node-panel" class="node-panel" data-node-id=${node}>
    <div class="panel-head"><h4>Node ${node}</h4><button class="ghost" id="close-node" onClick=${onClose}>Close</button></div>
    <div class="kv"><span>Events</span><span>${d.events}</span></div>
    ${spec && html`<div class="kv"><span>Type</span><span>${spec.typeId}</span></div>`}
    <h5>Inputs</h5><${Value} v=${d.inputs ?? (spec && spec.inputs) ?? null} />
    ${spec && spec.config && html`<details class="node-config"><summary>Configuration</summary><${Value} v=${spec.config} /></details>`}
    ${children.length > 0 && html`<h5>Child runs</h5><ul class="child-runs">
      ${children.map((c) => html`<li key=${c.runId}><${Link} href=${`/ui/runs/${enc(c.runId)}`} class="child-link"
        data-child-run-id=${c.runId}>run ${c.runId}<//> <span class=${`phase phase-${c.status}`}>${c.status}</span></li>`)}
    </ul>`}
    <h5>Outputs</h5><${Value} v=${d.outputs} />
    ${d.errors.length > 0 && html`<h5>Errors</h5>${d.errors.map((e) => html`<${Value} v=${e} />`)}`}
    ${attempts.length > 0 && html`<h5>LLM call attempts</h5>
      <table class="table attempts" id="attempts">
        <thead><tr><th>#</th><th>Model</th><th>Budget</th><th>Finish</th><th>Tokens in/out</th><th>Latency</th><th>Envelope</th><th>Then</th></tr></thead>
        <tbody>${attempts.map((a) => html`<tr class="attempt" data-attempt=${a.attempt} data-outcome=${a.outcome || ''}>
          <td>${a.attempt}</td>
          <td>${[a.provider, a.model].filter(Boolean).join(' / ')}</td>
          <td class="budget">${a.maxTokens ?? ''}</td>
          <td class="finish">${a.finishReason ?? ''}</td>
          <td>${a.tokensIn ?? '?'} / ${a.tokensOut ?? '?'}</td>
          <td>${a.latencyMs === null ? '' : `${a.latencyMs} ms`}</td>
          <td class="outcome">${a.outcome || ''}${a.recovery ? ` (recovery: ${a.recovery})` : ''}${a.detail ? html`<div class="detail">${a.detail}</div>` : ''}</td>
          <td class="next">${a.next || ''}</td>
        </tr>
        <tr class="attempt-events"><td></td><td colspan="7">events ${a.events.map((s) => html`<button class="link" onClick=${() => onEvent(s)}>#${s}</button> `)}</td></tr>`)}</tbody>
      </table>`}
  </div>`;
}
