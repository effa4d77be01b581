import { useEffect, useRef, useState } from 'preact/hooks';
import { html } from './html.js';
import { nodeOf } from './model.js';

const ROW = 26; const VIEW = 420; const OVERSCAN = 10;

function summary(e) {
  const p = e.payload || {};
  switch (e.type) {
    case 'log.appended': return p.message || (p.fields && p.fields.attempt ? `call attempt ${p.fields.attempt}` : '');
    case 'envelope.retry.attempted': return `attempt ${p.attempt}: ${p.reason}`;
    case 'node.failed': return p.error ? `${p.error.code}: ${p.error.message}` : '';
    case 'run.failed': return p.error ? `${p.error.code}: ${p.error.message}` : '';
    case 'envelope.truncated': return `${p.stopReason || ''} ${p.outputTokenCount ?? ''}`;
    // Each tool call: the tool and its arguments, then how it returned, how long it took
    // and the start of what the model read.
    case 'agent.toolCalled': return `${p.toolId || p.toolName || ''}${p.safetyTier ? ` (${p.safetyTier})` : ''} ${p.inputs !== undefined ? JSON.stringify(p.inputs) : ''}`;
    case 'agent.toolReturned': return `${p.toolId || p.toolName || ''} ${p.status || ''}${p.durationMs !== undefined ? ` ${p.durationMs} ms` : ''}${p.error ? ` ${p.error.code}: ${p.error.message}` : (p.resultPreview ? ` → ${p.resultPreview}` : '')}`;
    default: return '';
  }
}

// The run's events, virtualised: only the rows in view are in the DOM (fixed row height), so a
// 10,000-event run scrolls as fast as a short one. The selected event's JSON shows below.
export function Timeline({ events, selected, onSelect }) {
  const box = useRef(null);
  const [top, setTop] = useState(0);
  const [follow, setFollow] = useState(selected === null);
  const scrolled = useRef(false);
  // Follow the tail while live, unless the user scrolled up or a deep link picked an event.
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    if (selected !== null && !scrolled.current) {
      const i = events.findIndex((e) => e.sequence === selected);
      if (i >= 0) { el.scrollTop = Math.max(0, i * ROW - VIEW / 2); scrolled.current = true; setTop(el.scrollTop); }
      return;
    }
    if (follow) { el.scrollTop = el.scrollHeight; setTop(el.scrollTop); }
  }, [events.length, selected]);
  const onScroll = (ev) => {
    const el = ev.currentTarget;
    setTop(el.scrollTop);
    setFollow(el.scrollTop + el.clientHeight >= el.scrollHeight - ROW);
  };
  const first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
  const last = Math.min(events.length, Math.ceil((top + VIEW) / ROW) + OVERSCAN);
  const rows = [];
  for (let i = first; i < last; i++) {
    const e = events[i];
    rows.push(html`<div key=${e.sequence} class=${`event${selected === e.sequence ? ' selected' : ''} type-${e.type.replace(/\./g, '-')}`}
        data-seq=${e.sequence} data-type=${e.type} style=${{ top: `${i * ROW}px` }}
        onClick=${() => onSelect(selected === e.sequence ? null : e.sequence)}>
      <span class="seq">#${e.sequence}</span>
      <span class="etype">${e.type}</span>
      <span class="enode">${nodeOf(e) || ''}</span>
      <span class="esum">${summary(e)}</span>
    </div>`);
  }
  const sel = selected === null ? null : events.find((e) => e.sequence === selected);
  return html`<div>
    <div id="timeline" class="timeline" ref=${box} onScroll=${onScroll} style=${{ height: `${VIEW}px` }}>
      <div class="timeline-inner" style=${{ height: `${events.length * ROW}px` }}>${rows}</div>
    </div>
    ${sel && html`<div id="event-detail" class="event-detail" data-seq=${sel.sequence}>
      <div class="panel-head"><h4>Event #${sel.sequence} · ${sel.type}</h4>
        <button class="ghost" onClick=${() => onSelect(null)}>Close</button></div>
      <pre class="json">${JSON.stringify(sel, null, 2)}</pre>
    </div>`}
  </div>`;
}
