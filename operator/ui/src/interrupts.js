import { useState } from 'preact/hooks';
import { html } from './html.js';
import { post, enc } from './api.js';
import { nodeOf, interruptRequest, parseResumeValue, textOf } from './model.js';

const RESOLVED = new Set(['clarification.resolved', 'approval.received', 'approval.granted', 'approval.rejected']);
// Kinds whose card asks questions or offers approve / reject; any other kind the host emits
// (`custom`, and whatever comes later) gets the JSON card.
const FORM_KINDS = new Set(['approval', 'clarification']);
// An `interrupt.resolved` is listed only for the kinds that have no resolution event of their own.
const resolvedHere = (e) => RESOLVED.has(e.type)
  || (e.type === 'interrupt.resolved' && !FORM_KINDS.has((e.payload || {}).kind));

async function answer(runId, nodeId, body) {
  await post(`/v1/runs/${enc(runId)}/interrupts/${enc(nodeId)}`, body);
}

// The actions an approval offers when its snapshot lists none (a low-confidence check).
const DEFAULT_ACTIONS = ['accept', 'reject'];
// How each action the spec names is offered (`interrupt.md` §ApprovalResume).
const ACTION_LABELS = {
  accept: 'Approve', reject: 'Reject', refine: 'Request changes', 'edit-accept': 'Edit and accept',
};
// What a `refine` is about (`refineFeedback.scope`), as the host checks it.
const REFINE_SCOPES = ['whole', 'section', 'items'];

// The resume value of an approval action, or why the form cannot send it yet: `refine` needs
// its feedback, `edit-accept` the edited artifact as JSON (RFC 0183: the action means nothing
// without them, and the host refuses it).
export function approvalValue(action, { scope, section, feedback, edited }) {
  if (action === 'refine') {
    if (!feedback.trim()) return { error: 'Say what should change.' };
    const refineFeedback = { scope, text: feedback.trim() };
    if (scope === 'section' && section.trim()) refineFeedback.sectionPath = section.trim();
    return { value: { action, refineFeedback } };
  }
  if (action === 'edit-accept') {
    let editedArtifactData;
    try { editedArtifactData = JSON.parse(edited); } catch (e) { return { error: `Not JSON: ${e.message}` }; }
    return { value: { action, editedArtifactData } };
  }
  return { value: { action } };
}

// The call a tool-call approval decides on (the LLM node's tool loop): the tool, its tier as
// the host classified it, and the arguments (redacted by the host) it would be called with.
function ToolCall({ call }) {
  return html`<div class="tool-call" data-tool-id=${call.toolId || call.toolName}>
    <p class="tool">Tool <code>${call.toolId || call.toolName}</code>${call.safetyTier ? html` · <span class="tier">${call.safetyTier}</span>` : ''}</p>
    <pre class="json arguments">${textOf(call.arguments ?? {})}</pre>
  </div>`;
}

function Card({ runId, it, events, canUpdate, onAnswered }) {
  const approval = it.kind === 'approval';
  const req = interruptRequest(events, it.interruptId);
  const toolCall = req && req.data && req.data.artifactType === 'tool-call' ? req.data.toolCall : null;
  const actions = it.actions && it.actions.length ? it.actions : DEFAULT_ACTIONS;
  const [answers, setAnswers] = useState({});
  const [comment, setComment] = useState('');
  // The action whose extra form is open (`refine` / `edit-accept`), and what it holds.
  const [open, setOpen] = useState(null);
  const [extra, setExtra] = useState({ scope: 'whole', section: '', feedback: '', edited: '{}' });
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const send = async (resumeValue) => {
    setBusy(true); setError(null);
    try {
      const body = { resumeValue };
      if (comment.trim()) body.comment = comment.trim();
      await answer(runId, it.nodeId, body);
      onAnswered();
    } catch (e) { setError(e.message); } finally { setBusy(false); }
  };
  const qs = it.questions || [];
  return html`<div class="interrupt-card" data-node-id=${it.nodeId} data-kind=${it.kind} data-interrupt-id=${it.interruptId}>
    <h4>${approval ? 'Approval' : 'Clarification'} needed at ${it.nodeId}</h4>
    ${it.reason && html`<p class="reason">${it.reason}${typeof it.observed === 'number' && typeof it.threshold === 'number'
      ? ` (confidence ${it.observed} below ${it.threshold})` : ''}${it.agentId ? ` · agent ${it.agentId}` : ''}</p>`}
    ${it.title && html`<p class="title">${it.title}</p>`}
    ${it.message && html`<p class="message">${it.message}</p>`}
    ${toolCall && html`<${ToolCall} call=${toolCall} />`}
    ${!approval && html`<form onSubmit=${(e) => { e.preventDefault(); send({ answers }); }}>
      ${qs.map((qq) => html`<label class="question">${qq.question}
        <input name=${qq.id} data-question-id=${qq.id} disabled=${!canUpdate} value=${answers[qq.id] || ''}
          onInput=${(e) => setAnswers({ ...answers, [qq.id]: e.target.value })} /></label>`)}
      ${canUpdate && html`<button type="submit" class="answer" disabled=${busy || qs.some((qq) => !(answers[qq.id] || '').trim())}>Send answers</button>`}
    </form>`}
    ${approval && canUpdate && html`<div>
      <label>Comment (optional)<textarea class="comment" rows="2" value=${comment} onInput=${(e) => setComment(e.target.value)}></textarea></label>
      ${actions.map((a) => html`<button class=${`${a === 'accept' ? 'approve' : a}${a === 'reject' ? ' danger' : ''}`}
        data-action=${a} disabled=${busy}
        onClick=${() => (a === 'refine' || a === 'edit-accept' ? setOpen(open === a ? null : a) : send({ action: a }))}>${ACTION_LABELS[a] || a}</button>`)}
      ${open && html`<${ActionForm} action=${open} extra=${extra} setExtra=${setExtra} busy=${busy} send=${send} />`}
    </div>`}
    ${canUpdate === false && html`<p class="hint">Read-only: this token may not answer.</p>`}
    ${error && html`<p class="error" role="alert">${error}</p>`}
  </div>`;
}

// The extra form of `refine` (scope, section, what should change) or `edit-accept` (the edited
// artifact as JSON), sent only once it is complete.
function ActionForm({ action, extra, setExtra, busy, send }) {
  const v = approvalValue(action, extra);
  const set = (k) => (e) => setExtra({ ...extra, [k]: e.target.value });
  return html`<form class=${`action-form ${action}-form`} onSubmit=${(e) => { e.preventDefault(); if (v.value) send(v.value); }}>
    ${action === 'refine' && html`
      <label>About<select class="refine-scope" value=${extra.scope} onChange=${set('scope')}>
        ${REFINE_SCOPES.map((sc) => html`<option value=${sc}>${sc}</option>`)}</select></label>
      ${extra.scope === 'section' && html`<label>Section<input class="refine-section" value=${extra.section} onInput=${set('section')} /></label>`}
      <label>What should change<textarea class="refine-feedback" rows="3" value=${extra.feedback} onInput=${set('feedback')}></textarea></label>`}
    ${action === 'edit-accept' && html`
      <label>Edited artifact (JSON)<textarea class="edited-artifact" rows="4" spellcheck="false" value=${extra.edited} onInput=${set('edited')}></textarea></label>`}
    ${v.error && html`<p class="error action-error">${v.error}</p>`}
    <button type="submit" class="send-action" disabled=${busy || !!v.error}>Send</button>
  </form>`;
}

// The payload of a custom interrupt, as text: a string as written, anything else as JSON.
function Shown({ v }) {
  if (v === undefined || v === null) return null;
  if (typeof v === 'string') return html`<p class="payload">${v}</p>`;
  return html`<pre class="json payload">${textOf(v)}</pre>`;
}

// An interrupt of a kind without a form (`custom`): what it carries, shown as text, and an
// editor for the JSON object that resumes it, checked before it is sent.
function CustomCard({ runId, it, events, canUpdate, onAnswered }) {
  const req = interruptRequest(events, it.interruptId);
  const data = (req && req.data) || {};
  const [text, setText] = useState('{}');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const parsed = parseResumeValue(text);
  const send = async (ev) => {
    ev.preventDefault();
    if (parsed.error) return;
    setBusy(true); setError(null);
    try {
      await answer(runId, it.nodeId, { resumeValue: parsed.value });
      onAnswered();
    } catch (e) { setError(e.message); } finally { setBusy(false); }
  };
  const sub = typeof data.customKind === 'string' ? data.customKind : null;
  const rest = data.payload !== undefined ? data.payload
    : (Object.keys(data).some((k) => k !== 'customKind') ? data : undefined);
  return html`<div class="interrupt-card" data-node-id=${it.nodeId} data-kind=${it.kind} data-interrupt-id=${it.interruptId}>
    <h4>Input needed at ${it.nodeId} <span class="meta">(${it.kind}${sub ? `: ${sub}` : ''})</span></h4>
    ${req && req.key && html`<p class="meta">key ${req.key}</p>`}
    <${Shown} v=${rest} />
    <form onSubmit=${send}>
      <label>Resume value (a JSON object)
        <textarea class="resume-value" rows="4" spellcheck="false" readOnly=${!canUpdate} value=${text}
          onInput=${(e) => setText(e.target.value)}></textarea></label>
      ${parsed.error && html`<p class="error resume-error">${parsed.error}</p>`}
      ${canUpdate && html`<button type="submit" class="resume" disabled=${busy || !!parsed.error}>Resume</button>`}
    </form>
    ${canUpdate === false && html`<p class="hint">Read-only: this token may not answer.</p>`}
    ${error && html`<p class="error" role="alert">${error}</p>`}
  </div>`;
}

// Each pending interrupt of the run as a card, and the human steps already answered (with
// what the events say about who answered).
export function Interrupts({ runId, snapshot, events, canUpdate, onAnswered }) {
  const pending = snapshot.pendingInterrupts || [];
  const done = events.filter(resolvedHere);
  if (!pending.length && !done.length) return null;
  return html`<section class="interrupts" id="interrupts">
    ${pending.map((it) => (FORM_KINDS.has(it.kind)
    ? html`<${Card} key=${it.interruptId} runId=${runId} it=${it} events=${events} canUpdate=${canUpdate} onAnswered=${onAnswered} />`
    : html`<${CustomCard} key=${it.interruptId} runId=${runId} it=${it} events=${events} canUpdate=${canUpdate} onAnswered=${onAnswered} />`))}
    ${done.length > 0 && html`<ul class="resolved" id="resolved">
      ${done.map((e) => {
        const p = e.payload || {};
        const who = p.decidedBy || p.answeredBy || p.resolvedBy || p.principal;
        const when = p.decidedAt || p.answeredAt || p.resolvedAt;
        return html`<li data-seq=${e.sequence}>#${e.sequence} ${e.type}${p.action ? ` (${p.action})` : ''} at ${nodeOf(e) || ''}${who ? ` by ${typeof who === 'string' ? who : JSON.stringify(who)}` : ''}${when ? ` at ${when}` : ''}${p.comment ? ` — “${p.comment}”` : ''}${p.refineFeedback && p.refineFeedback.text ? ` — changes: “${p.refineFeedback.text}”` : ''}</li>`;
      })}
    </ul>`}
  </section>`;
}
