import { useState } from 'preact/hooks';
import { html } from './html.js';
import { post, enc } from './api.js';
import { nodeOf } from './model.js';

const RESOLVED = new Set(['clarification.resolved', 'approval.received', 'approval.granted', 'approval.rejected']);

function Card({ runId, it, canUpdate, onAnswered }) {
  const approval = it.kind === 'approval';
  const [answers, setAnswers] = useState({});
  const [comment, setComment] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const send = async (resumeValue) => {
    setBusy(true); setError(null);
    try {
      const body = { resumeValue };
      if (comment.trim()) body.comment = comment.trim();
      await post(`/v1/runs/${enc(runId)}/interrupts/${enc(it.nodeId)}`, body);
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
    ${!approval && html`<form onSubmit=${(e) => { e.preventDefault(); send({ answers }); }}>
      ${qs.map((qq) => html`<label class="question">${qq.question}
        <input name=${qq.id} data-question-id=${qq.id} disabled=${!canUpdate} value=${answers[qq.id] || ''}
          onInput=${(e) => setAnswers({ ...answers, [qq.id]: e.target.value })} /></label>`)}
      ${canUpdate && html`<button type="submit" class="answer" disabled=${busy || qs.some((qq) => !(answers[qq.id] || '').trim())}>Send answers</button>`}
    </form>`}
    ${approval && canUpdate && html`<div>
      <label>Comment (optional)<textarea class="comment" rows="2" value=${comment} onInput=${(e) => setComment(e.target.value)}></textarea></label>
      <button class="approve" disabled=${busy} onClick=${() => send({ action: 'accept' })}>Approve</button>
      <button class="reject danger" disabled=${busy} onClick=${() => send({ action: 'reject' })}>Reject</button>
    </div>`}
    ${!canUpdate && html`<p class="hint">Read-only: this token may not answer.</p>`}
    ${error && html`<p class="error" role="alert">${error}</p>`}
  </div>`;
}

// Each pending interrupt of the run as a card, and the human steps already answered (with
// what the events say about who answered).
export function Interrupts({ runId, snapshot, events, canUpdate, onAnswered }) {
  const pending = snapshot.pendingInterrupts || [];
  const done = events.filter((e) => RESOLVED.has(e.type));
  if (!pending.length && !done.length) return null;
  return html`<section class="interrupts" id="interrupts">
    ${pending.map((it) => html`<${Card} key=${it.interruptId} runId=${runId} it=${it} canUpdate=${canUpdate} onAnswered=${onAnswered} />`)}
    ${done.length > 0 && html`<ul class="resolved" id="resolved">
      ${done.map((e) => {
        const p = e.payload || {};
        const who = p.decidedBy || p.answeredBy || p.resolvedBy || p.principal;
        const when = p.decidedAt || p.answeredAt;
        return html`<li data-seq=${e.sequence}>#${e.sequence} ${e.type}${p.action ? ` (${p.action})` : ''} at ${nodeOf(e) || ''}${who ? ` by ${typeof who === 'string' ? who : JSON.stringify(who)}` : ''}${when ? ` at ${when}` : ''}${p.comment ? ` — “${p.comment}”` : ''}</li>`;
      })}
    </ul>`}
  </section>`;
}
