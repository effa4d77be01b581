import { html, Link } from './html.js';
import { layout } from './model.js';

const W = 150; const H = 40; const GX = 60; const GY = 24;

// The workflow's nodes and edges (from its definition) with each node's state from the run's
// events; nodes the events name that the definition does not (fan-out branches, sub-workflow
// children) are drawn in a row of their own under the graph. A node that started child runs
// (`core.subWorkflow`) carries a link to its child under its box, with the child's phase.
export function Graph({ def, states, selected, onSelect, children }) {
  if (!def) return html`<div class="graph loading">Loading workflow…</div>`;
  const nodes = def.nodes || [];
  const edges = def.edges || [];
  const known = new Set(nodes.map((n) => n.id));
  const extra = [...states.keys()].filter((id) => !known.has(id));
  const { pos, width, height } = layout(nodes, edges);
  const rows = height + (extra.length ? 1 : 0);
  const cols = Math.max(width, Math.min(extra.length, 6));
  extra.forEach((id, i) => pos.set(id, { x: i % 6, y: height + Math.floor(i / 6), extra: true }));
  const vw = cols * (W + GX) + GX;
  const vh = (rows + Math.floor(Math.max(0, extra.length - 1) / 6)) * (H + GY) + GY;
  const at = (id) => { const p = pos.get(id); return { x: GX / 2 + p.x * (W + GX), y: GY + p.y * (H + GY) }; };
  const box = (id, typeId, isExtra) => {
    const { x, y } = at(id);
    const st = states.get(id) || 'pending';
    return html`<g key=${id} class=${`node state-${st}${selected === id ? ' selected' : ''}${isExtra ? ' child' : ''}`}
        data-node-id=${id} data-state=${st} transform=${`translate(${x},${y})`}
        tabindex="0" role="button" onClick=${() => onSelect(id)}
        onKeyDown=${(e) => { if (e.key === 'Enter') onSelect(id); }}>
      <rect width=${W} height=${H} rx="6"></rect>
      <text x="10" y="17" class="node-id">${id.length > 20 ? `${id.slice(0, 19)}…` : id}</text>
      <text x="10" y="32" class="node-state">${st}${typeId ? ` · ${typeId.replace(/^core\./, '')}` : ''}</text>
      <title>${id}${typeId ? ` (${typeId})` : ''}: ${st}</title>
    </g>`;
  };
  // The first child of a node under its box (the node panel lists them all).
  const childLink = (id) => {
    const kids = (children && children.get(id)) || [];
    if (!kids.length || !pos.has(id)) return null;
    const c = kids[0];
    const { x, y } = at(id);
    // An SVG link (inside the svg element, Preact makes the anchor in the SVG namespace).
    return html`<${Link} key=${`child-${id}`} class=${`child-run phase-${c.status}`} href=${`/ui/runs/${encodeURIComponent(c.runId)}`}
        data-node-id=${id} data-child-run-id=${c.runId} data-status=${c.status}
        transform=${`translate(${x},${y + H + 2})`}>
      <rect width=${W} height="17" rx="8"></rect>
      <text x="8" y="12">↳ child ${c.status}${kids.length > 1 ? ` (+${kids.length - 1})` : ''}</text>
      <title>child run ${c.runId}: ${c.status}</title>
    <//>`;
  };
  return html`<div class="graph">
    <svg id="graph" viewBox=${`0 0 ${vw} ${vh}`} width=${vw} height=${vh} role="img" aria-label="workflow graph">
      ${edges.filter((e) => pos.has(e.sourceNodeId) && pos.has(e.targetNodeId)).map((e) => {
        const a = at(e.sourceNodeId); const b = at(e.targetNodeId);
        const x1 = a.x + W; const y1 = a.y + H / 2; const x2 = b.x; const y2 = b.y + H / 2;
        const mx = (x1 + x2) / 2;
        return html`<path key=${e.id} class="edge" d=${`M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`}></path>`;
      })}
      ${nodes.map((n) => box(n.id, n.typeId, false))}
      ${extra.map((id) => box(id, null, true))}
      ${[...pos.keys()].map(childLink)}
    </svg>
  </div>`;
}
