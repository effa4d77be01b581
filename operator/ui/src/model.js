// Pure views of a run's events: node states, each LLM call's attempts, the reasoning lane.
// Event shapes are the worker's (protocol/src/events.rs, protocol/src/retry/).

export const TERMINAL_RUN_EVENTS = new Set(['run.completed', 'run.failed', 'run.cancelled']);
export const TERMINAL_PHASES = new Set(['completed', 'failed', 'cancelled']);

export const nodeOf = (e) => e.nodeId || (e.payload && e.payload.nodeId) || null;

// Every state a node can show, and so every state `nodeStates` gives.
export const NODE_STATES = ['pending', 'running', 'waiting', 'completed', 'failed', 'skipped'];

// One of NODE_STATES per node id (a node not named is pending).
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
      case 'node.skipped':
        st.set(n, 'skipped'); break;
      default:
        if (!st.has(n)) st.set(n, 'running');
    }
  }
  return st;
}

// Every attempt of every LLM call of `node`, in order: what was asked (model, budget), what
// came back (finish reason, tokens, latency), how the envelope fared and what the retry
// router did next. The worker records each call twice in `log.appended` (`fields.attempt`
// before the call, `fields.providerResponse` after it), then emits `provider.usage`, the
// `envelope.*` outcome and, on a retry, `envelope.retry.attempted` naming the next attempt.
export function attemptsOf(events, node) {
  const byN = new Map();
  const out = [];
  let cur = null;
  const attempt = (n) => {
    if (!byN.has(n)) {
      const a = {
        attempt: n, model: null, provider: null, maxTokens: null, finishReason: null,
        tokensIn: null, tokensOut: null, latencyMs: null, outcome: null, detail: null,
        next: null, recovery: null, events: [], startedAt: null, answered: false,
      };
      byN.set(n, a);
      out.push(a);
    }
    return byN.get(n);
  };
  for (const e of events) {
    if (nodeOf(e) !== node) continue;
    const p = e.payload || {};
    const f = p.fields || {};
    if (e.type === 'log.appended' && f.providerResponse) {
      const pr = f.providerResponse;
      const r = pr.response || {};
      const a = attempt(pr.attempt ?? (cur ? cur.attempt : 1));
      cur = a;
      a.events.push(e.sequence);
      a.answered = true;
      a.maxTokens = pr.maxTokens ?? a.maxTokens;
      a.provider = r.provider ?? a.provider;
      a.model = r.model ?? a.model;
      const stop = r.stop || {};
      a.finishReason = stop.raw ?? stop.kind ?? a.finishReason;
      if (r.usage) { a.tokensIn = r.usage.inputTokens ?? a.tokensIn; a.tokensOut = r.usage.outputTokens ?? a.tokensOut; }
      if (a.startedAt && e.timestamp) a.latencyMs = Math.max(0, Math.round(Date.parse(e.timestamp) - Date.parse(a.startedAt)));
      if (stop.kind === 'truncated') a.outcome = 'truncated';
      if (r.refusalText) { a.outcome = 'refusal'; a.detail = r.refusalText; }
      continue;
    }
    if (e.type === 'log.appended' && f.attempt !== undefined) {
      const a = attempt(f.attempt);
      cur = a;
      a.events.push(e.sequence);
      a.maxTokens = f.maxTokens ?? a.maxTokens;
      a.startedAt = e.timestamp;
      continue;
    }
    if (!cur) continue;
    const a = cur;
    switch (e.type) {
      case 'provider.usage':
        a.events.push(e.sequence);
        a.provider = p.provider ?? a.provider; a.model = p.model ?? a.model;
        a.tokensIn = p.inputTokens ?? a.tokensIn; a.tokensOut = p.outputTokens ?? a.tokensOut;
        break;
      case 'envelope.truncated':
        a.events.push(e.sequence);
        a.outcome = 'truncated'; a.finishReason = p.stopReason ?? a.finishReason;
        break;
      case 'envelope.refusal':
        a.events.push(e.sequence);
        a.outcome = 'refusal'; a.detail = p.refusalText || p.safetyCategory || a.detail;
        a.next = 'stop: refusals are never retried';
        break;
      case 'envelope.recovery.applied':
        a.events.push(e.sequence);
        a.recovery = p.path;
        break;
      case 'envelope.retry.attempted':
        a.events.push(e.sequence);
        a.next = `retry as attempt ${p.attempt} (${p.reason})`;
        if (p.reason === 'truncation') a.outcome = 'truncated';
        else if (p.reason === 'schema-violation') a.outcome = 'schema violation';
        else a.outcome = p.reason;
        if (p.previousError && p.reason !== 'truncation') a.detail = p.previousError;
        break;
      case 'envelope.retry.exhausted':
        a.events.push(e.sequence);
        a.next = `give up after ${p.totalAttempts} attempts (${p.finalReason})`;
        if (p.finalReason === 'truncation') a.outcome = 'truncated';
        else if (p.finalReason === 'schema-violation') a.outcome = 'schema violation';
        if (p.finalError) a.detail = p.finalError;
        break;
      case 'cap.breached':
        a.events.push(e.sequence);
        a.next = `${a.next ? `${a.next}; ` : ''}cap ${p.kind} reached (${p.observed} of ${p.limit})`;
        break;
      case 'clarification.requested':
        if (!a.next) a.next = 'wait for the clarification';
        break;
      case 'node.completed':
        if (!a.next) a.next = 'done: output accepted';
        break;
      case 'node.failed':
        if (!a.next) a.next = `node failed${p.error ? `: ${p.error.code}` : ''}`;
        break;
      default:
    }
  }
  for (const a of out) if (!a.outcome && a.answered) a.outcome = 'accepted';
  return out;
}

// The reasoning lane: the run's reasoning stream (`lane`, from GET /v1/runs/{runId}/reasoning)
// and the `reasoning` fields of envelopes in its events — never mixed into the timeline.
export function reasoningOf(lane, events) {
  const out = [];
  lane.forEach((m, i) => {
    const p = m.payload || {};
    out.push({
      key: `lane-${i}`, seq: null, node: nodeOf(m), source: m.kind || 'reasoning',
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

// The snapshot's `childRuns` (the runs its sub-workflow nodes started, each with its phase as
// the operator last saw it), grouped by the node that started them.
export function childrenByNode(snapshot) {
  const by = new Map();
  for (const c of (snapshot && snapshot.childRuns) || []) {
    if (!by.has(c.nodeId)) by.set(c.nodeId, []);
    by.get(c.nodeId).push(c);
  }
  return by;
}

// What an interrupt asks for, from its `interrupt.requested` event (`data`: the custom kind
// and its payload, for instance); null until that event has arrived.
export function interruptRequest(events, interruptId) {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i];
    if (e.type === 'interrupt.requested' && e.payload && e.payload.interruptId === interruptId) return e.payload;
  }
  return null;
}

// A resume value typed by a person: the parsed JSON object, or why it is not one (the
// interrupts endpoint takes a JSON object as `resumeValue` for any kind but an approval).
export function parseResumeValue(text) {
  let v;
  try { v = JSON.parse(text); } catch (e) { return { error: `Not JSON: ${e.message}` }; }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    return { error: 'The resume value must be a JSON object, e.g. {"ok": true}.' };
  }
  return { value: v };
}
