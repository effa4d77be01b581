// Pure views of a run's events: node states, each LLM call's attempts, the reasoning lane.
// Event shapes are the worker's (protocol/src/events.rs, protocol/src/retry/).

export const TERMINAL_RUN_EVENTS = new Set(['run.completed', 'run.failed', 'run.cancelled']);
export const TERMINAL_PHASES = new Set(['completed', 'failed', 'cancelled']);

export const nodeOf = (e) => e.nodeId || (e.payload && e.payload.nodeId) || null;

// pending / running / waiting / completed / failed / skipped, per node id.
export function nodeStates(events) {
  const st = new Map();
  for (const e of events) {
    const n = nodeOf(e);
    if (!n) continue;
    switch (e.type) {
      case 'node.started':
      case 'node.resumed':
        st.set(n, 'running'); break;
      case 'node.suspended':
      case 'clarification.requested':
      case 'approval.requested':
      case 'interrupt.requested':
        st.set(n, 'waiting'); break;
      case 'node.completed': {
        const p = e.payload || {};
        st.set(n, p.skipped || p.status === 'skipped' ? 'skipped' : 'completed'); break;
      }
      case 'node.failed':
        st.set(n, 'failed'); break;
      default:
        if (!st.has(n)) st.set(n, 'running');
    }
  }
  return st;
}

const ATTEMPT_EVENTS = new Set([
  'prompt.composed', 'provider.usage', 'envelope.truncated', 'envelope.refusal',
  'envelope.retry.attempted', 'envelope.retry.exhausted', 'envelope.recovery.applied',
  'envelope.nl-to-format.engaged', 'cap.breached',
]);

// The provider-call record of a `log.appended` event, or null.
function callRecord(e) {
  if (e.type !== 'log.appended') return null;
  const f = (e.payload && e.payload.fields) || {};
  if (f.attempt === undefined && f.providerResponse === undefined && f.maxTokens === undefined) return null;
  return f;
}

// Every attempt of every LLM call of `node`, in order: what was asked (model, budget), what
// came back (finish reason, tokens, latency), how the envelope fared and what the retry
// router did next.
export function attemptsOf(events, node) {
  const out = [];
  let cur = null;
  const open = (n) => {
    cur = {
      attempt: n, model: null, provider: null, maxTokens: null, finishReason: null,
      tokensIn: null, tokensOut: null, latencyMs: null, outcome: null, detail: null,
      next: null, recovery: null, events: [],
    };
    out.push(cur);
    return cur;
  };
  for (const e of events) {
    if (nodeOf(e) !== node) continue;
    const rec = callRecord(e);
    if (!rec && !ATTEMPT_EVENTS.has(e.type)) continue;
    const p = e.payload || {};
    if (rec) {
      const n = rec.attempt || (cur ? cur.attempt + 1 : 1);
      const a = cur && cur.attempt === n && cur.maxTokens === null ? cur : open(n);
      a.events.push(e.sequence);
      a.maxTokens = rec.maxTokens ?? a.maxTokens;
      a.model = rec.model ?? a.model;
      a.provider = rec.provider ?? a.provider;
      const r = rec.providerResponse || {};
      a.finishReason = r.stopReason ?? r.finishReason ?? rec.stopReason ?? a.finishReason;
      a.tokensIn = r.inputTokens ?? rec.inputTokens ?? a.tokensIn;
      a.tokensOut = r.outputTokens ?? rec.outputTokens ?? a.tokensOut;
      a.latencyMs = r.latencyMs ?? rec.latencyMs ?? a.latencyMs;
      if (!a.outcome) a.outcome = 'accepted';
      continue;
    }
    if (e.type === 'envelope.retry.attempted') {
      // The router's decision after the previous attempt.
      if (cur) cur.next = `retry (attempt ${p.attempt}, ${p.reason})`;
      open(p.attempt).events.push(e.sequence);
      continue;
    }
    const a = cur || open(1);
    a.events.push(e.sequence);
    switch (e.type) {
      case 'prompt.composed':
        a.model = p.model ?? a.model; a.provider = p.provider ?? a.provider;
        a.maxTokens = p.maxTokens ?? a.maxTokens; break;
      case 'provider.usage':
        a.model = p.model ?? a.model; a.provider = p.provider ?? a.provider;
        a.tokensIn = p.inputTokens ?? p.promptTokens ?? a.tokensIn;
        a.tokensOut = p.outputTokens ?? p.completionTokens ?? a.tokensOut;
        a.latencyMs = p.latencyMs ?? a.latencyMs;
        a.finishReason = p.stopReason ?? p.finishReason ?? a.finishReason; break;
      case 'envelope.truncated':
        a.outcome = 'truncated'; a.finishReason = p.stopReason ?? a.finishReason;
        a.model = p.model ?? a.model; a.tokensOut = p.outputTokenCount ?? a.tokensOut; break;
      case 'envelope.refusal':
        a.outcome = 'refusal'; a.detail = p.refusalText || p.safetyCategory || null;
        a.model = p.model ?? a.model; a.next = 'stop (refusals are not retried)'; break;
      case 'envelope.recovery.applied':
        a.recovery = p.path; break;
      case 'envelope.retry.exhausted':
        a.next = `give up after ${p.totalAttempts} attempts (${p.finalReason})`;
        if (p.finalError) a.detail = p.finalError; break;
      case 'cap.breached':
        a.next = `${a.next ? a.next + '; ' : ''}cap ${p.kind} reached (${p.observed}/${p.limit})`; break;
      default:
    }
  }
  // A retry's reason names what went wrong with the attempt before it.
  for (let i = 1; i < out.length; i++) {
    const prev = out[i - 1];
    const ev = events.find((e) => e.type === 'envelope.retry.attempted' && nodeOf(e) === node && e.payload.attempt === out[i].attempt);
    if (!ev) continue;
    const reason = ev.payload.reason;
    if (reason === 'schema-violation' && prev.outcome !== 'truncated') {
      prev.outcome = 'schema violation';
      prev.detail = ev.payload.previousError || prev.detail;
    } else if (reason === 'truncation') {
      prev.outcome = 'truncated';
    } else if (prev.outcome === 'accepted' || !prev.outcome) {
      prev.outcome = reason;
      prev.detail = ev.payload.previousError || prev.detail;
    }
  }
  return out.filter((a) => a.events.length);
}

// The reasoning lane: the run's reasoning stream (`lane`, from GET /v1/runs/{runId}/reasoning)
// and the `reasoning` fields of envelopes in its events — never mixed into the timeline.
export function reasoningOf(lane, events) {
  const out = [];
  lane.forEach((m, i) => {
    const p = m.payload || {};
    out.push({
      key: `lane-${i}`, seq: m.sequence ?? null, node: nodeOf(m), source: m.type || 'reasoning',
      text: textOf(p.message ?? p.reasoning ?? p.delta ?? p.text ?? p),
    });
  });
  for (const e of events) {
    const p = e.payload || {};
    if (e.type === 'agent.reasoned' || e.type === 'agent.reasoning.delta') {
      out.push({ key: `ev-${e.sequence}`, seq: e.sequence, node: nodeOf(e), source: e.type, text: textOf(p.reasoning ?? p.summary ?? p.delta ?? p.text ?? p) });
      continue;
    }
    if (e.type !== 'node.completed') continue;
    // An envelope's own `reasoning` field, as the node's output carries it.
    const o = p.outputs || {};
    const r = (o.output && typeof o.output === 'object' && o.output.reasoning) || o.reasoning;
    if (r !== undefined && r !== null) {
      out.push({ key: `env-${e.sequence}`, seq: e.sequence, node: nodeOf(e), source: 'envelope reasoning', text: textOf(r) });
    }
  }
  return out;
}

export const textOf = (v) => (typeof v === 'string' ? v : JSON.stringify(v, null, 2));

// Inputs, outputs and errors of a node, from its events.
export function nodeDetails(events, node) {
  const d = { inputs: null, outputs: null, errors: [], events: 0 };
  for (const e of events) {
    if (nodeOf(e) !== node) continue;
    d.events++;
    const p = e.payload || {};
    if (e.type === 'node.started' && p.inputs !== undefined) d.inputs = p.inputs;
    if (e.type === 'node.completed') d.outputs = p.outputs ?? p.output ?? p;
    if (e.type === 'node.failed') d.errors.push(p.error || p);
  }
  return d;
}

// Layers of a DAG for drawing: each node one column right of its furthest predecessor.
export function layout(nodes, edges) {
  const ids = nodes.map((n) => n.id);
  const preds = new Map(ids.map((i) => [i, []]));
  for (const e of edges) if (preds.has(e.targetNodeId) && preds.has(e.sourceNodeId)) preds.get(e.targetNodeId).push(e.sourceNodeId);
  const depth = new Map();
  const visit = (id, seen) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0; // a cycle (loops): cut it
    seen.add(id);
    const d = Math.max(-1, ...preds.get(id).map((p) => visit(p, seen))) + 1;
    depth.set(id, d);
    return d;
  };
  ids.forEach((i) => visit(i, new Set()));
  const cols = [];
  for (const id of ids) {
    const d = depth.get(id);
    (cols[d] = cols[d] || []).push(id);
  }
  const pos = new Map();
  cols.forEach((col, x) => col.forEach((id, y) => pos.set(id, { x, y })));
  return { pos, width: cols.length, height: Math.max(1, ...cols.map((c) => c.length)) };
}
