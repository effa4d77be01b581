import { useEffect, useState, useRef } from 'preact/hooks';
import { html, Link, age, duration, navigate } from './html.js';
import { get, q } from './api.js';

const PHASES = ['', 'pending', 'running', 'paused', 'waiting-input', 'waiting-approval', 'waiting-external', 'completed', 'failed', 'cancelling', 'cancelled'];
const PAGE = 50;
const POLL_MS = 2000;

function params() {
  const p = new URLSearchParams(window.location.search);
  return { tenant: p.get('tenant') || '', status: p.get('status') || '', workflow: p.get('workflow') || '' };
}

export function RunsPage({ session }) {
  const init = params();
  const [tenants, setTenants] = useState(null);
  const [tenant, setTenant] = useState(init.tenant);
  const [status, setStatus] = useState(init.status);
  const [workflow, setWorkflow] = useState(init.workflow);
  const [cursors, setCursors] = useState(['']);
  const [page, setPage] = useState(null);
  const [error, setError] = useState(null);
  const seq = useRef(0);

  useEffect(() => {
    get('/v1/tenants').then((t) => {
      setTenants(t.tenants);
      if (!tenant || !t.tenants.some((x) => x.tenantId === tenant)) {
        const dflt = t.tenants.find((x) => x.tenantId === session.defaultTenant) || t.tenants[0];
        setTenant(dflt ? dflt.tenantId : '');
      }
    }).catch((e) => setError(e.message));
  }, []);

  // Keep the filters in the address (shareable, back button).
  useEffect(() => {
    const s = q({ tenant, status, workflow });
    if (window.location.search !== s) window.history.replaceState(null, '', `/ui/${s}`);
    setCursors(['']);
  }, [tenant, status, workflow]);

  const cursor = cursors[cursors.length - 1];
  // Live: the page polls the listing; new runs and phase changes show within POLL_MS.
  useEffect(() => {
    if (!tenant) return undefined;
    let stop = false;
    let timer;
    const load = async () => {
      const mine = ++seq.current;
      try {
        const r = await get(`/v1/runs${q({ tenantId: tenant, status, workflowId: workflow, limit: PAGE, cursor })}`);
        if (!stop && mine === seq.current) { setPage(r); setError(null); }
      } catch (e) {
        if (!stop) setError(e.message);
      }
      if (!stop) timer = setTimeout(load, POLL_MS);
    };
    load();
    return () => { stop = true; clearTimeout(timer); };
  }, [tenant, status, workflow, cursor]);

  const t = tenants && tenants.find((x) => x.tenantId === tenant);
  return html`<main class="runs">
    <div class="filters">
      <label>Namespace
        <select id="tenant" value=${tenant} onChange=${(e) => setTenant(e.target.value)}>
          ${(tenants || []).map((x) => html`<option value=${x.tenantId}>${x.tenantId}</option>`)}
        </select></label>
      <label>Status
        <select id="status-filter" value=${status} onChange=${(e) => setStatus(e.target.value)}>
          ${PHASES.map((p) => html`<option value=${p}>${p || 'any'}</option>`)}
        </select></label>
      <label>Workflow
        <input id="workflow-filter" value=${workflow} placeholder="workflow id"
          onChange=${(e) => setWorkflow(e.target.value.trim())} /></label>
      ${t && !t.canUpdateRuns && html`<span class="badge" id="read-only">read-only</span>`}
    </div>
    ${tenants && tenants.length === 0 && html`<p class="empty">This token may list runs in no namespace this operator serves.</p>`}
    ${error && html`<p class="error" role="alert">${error}</p>`}
    ${page && html`<table id="runs" class="table">
      <thead><tr><th>Run</th><th>Status</th><th>Workflow</th><th>Current node</th><th>Age</th><th>Duration</th></tr></thead>
      <tbody>
        ${page.runs.map((r) => html`<tr key=${r.runId} data-run-id=${r.runId} data-status=${r.status}
            class="clickable" onClick=${(e) => { if (e.target.tagName !== 'A') navigate(`/ui/runs/${encodeURIComponent(r.runId)}`); }}>
          <td><${Link} href=${`/ui/runs/${encodeURIComponent(r.runId)}`} class="run-link">${r.name}<//></td>
          <td><span class=${`phase phase-${r.status}`}>${r.status}</span></td>
          <td>${r.workflowId}</td>
          <td>${r.currentNodeId || ''}</td>
          <td title=${r.createdAt}>${age(r.createdAt)}</td>
          <td>${duration(r.startedAt, r.completedAt)}</td>
        </tr>`)}
      </tbody>
    </table>
    <div class="pager">
      <span id="total">${page.total} runs</span>
      <button id="prev-page" disabled=${cursors.length < 2} onClick=${() => setCursors(cursors.slice(0, -1))}>Previous</button>
      <span>page ${cursors.length}</span>
      <button id="next-page" disabled=${!page.nextCursor} onClick=${() => setCursors([...cursors, page.nextCursor])}>Next</button>
    </div>`}
  </main>`;
}
