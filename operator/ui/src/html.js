// htm over Preact: templates are tagged literals, so every interpolated string becomes a text
// node or an attribute value — never markup. The page never uses dangerouslySetInnerHTML.
import { h } from 'preact';
import htm from 'htm';

export const html = htm.bind(h);

export function navigate(path) {
  window.history.pushState(null, '', path);
  window.dispatchEvent(new Event('openwop:navigate'));
}

// An in-app link (only ever to paths the page builds itself).
export function Link({ href, children, ...rest }) {
  const go = (ev) => {
    if (ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
    ev.preventDefault();
    navigate(href);
  };
  return html`<a href=${href} onClick=${go} ...${rest}>${children}</a>`;
}

export function age(iso) {
  if (!iso) return '';
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

export function duration(from, to) {
  if (!from) return '';
  const ms = (to ? Date.parse(to) : Date.now()) - Date.parse(from);
  if (!(ms >= 0)) return '';
  if (ms < 1000) return `${ms}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  return `${Math.floor(s / 60)}m${Math.floor(s % 60)}s`;
}
