//! The run page's workflow graph with long labels: the demo's `extract` once read
//! "completed · ai.structuredOutput" across its box's border into the edge. Measured in the
//! browser, every label must lie inside its node's box, edges must start and end on box
//! borders, boxes must not overlap, and each box's title (the hover text) must hold the whole
//! node id and type id.

use super::*;

/// 41 characters: longer than the widest box the graph draws.
const LONG_ID: &str = "summarise-the-ticket-for-the-billing-team";

/// `extract` → [`LONG_ID`] (both `core.ai.structuredOutput`, answered by mocks) → `done`.
fn long_labels(name: &str) -> [Value; 2] {
    let config = |prompt: &str| {
        json!({"provider": "openai", "model": "gpt-4o-mini", "prompt": prompt, "maxTokens": 256,
            "outputSchema": {"type": "object", "additionalProperties": false,
                "required": ["summary"], "properties": {"summary": {"type": "string"}}}})
    };
    let wf = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "long-labels"},
        "spec": {"id": "long-labels", "name": "Long labels", "version": "1",
            "providers": [{"provider": "openai", "secretRef": {"name": "llm", "key": "openai"}}],
            "nodes": [{"id": "extract", "typeId": "core.ai.structuredOutput", "config": config("Classify the ticket.")},
                      {"id": LONG_ID, "typeId": "core.ai.structuredOutput", "config": config("Summarise the ticket.")},
                      {"id": "done", "typeId": "core.flow.noop"}],
            "edges": [{"id": "e1", "sourceNodeId": "extract", "targetNodeId": LONG_ID},
                      {"id": "e2", "sourceNodeId": LONG_ID, "targetNodeId": "done"}]}});
    let answer = json!({"responses": [{"stopReason": "stop", "content": {"summary": "a duplicate charge"}}]});
    let run = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": name},
        "spec": {"workflowRef": {"name": "long-labels"}, "timeoutSeconds": 300,
            "providerMocks": {"extract": answer, LONG_ID: answer}}});
    [wf, run]
}

/// Every node box of `#graph` as the browser lays it out (client pixels): its rect, its title,
/// each label's text and box; every edge's end points.
const MEASURE: &str = r#"
const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const nodes = [...document.querySelectorAll('#graph g.node')].map((g) => ({
  id: g.dataset.nodeId,
  rect: box(g.querySelector('rect')),
  title: (g.querySelector('title') || {}).textContent || null,
  labels: [...g.querySelectorAll('text')].map((t) => ({text: t.textContent, box: box(t)})),
}));
const edges = [...document.querySelectorAll('#graph path.edge')].map((p) => {
  const m = p.getScreenCTM();
  const at = (l) => { const q = new DOMPoint(p.getPointAtLength(l).x, p.getPointAtLength(l).y).matrixTransform(m); return [q.x, q.y]; };
  return {source: p.dataset.source || null, target: p.dataset.target || null, from: at(0), to: at(p.getTotalLength())};
});
return {nodes, edges};
"#;

/// Half a pixel: anti-aliasing, not overflow.
const SLACK: f64 = 0.5;

fn num(v: &Value, i: usize) -> f64 {
    v[i].as_f64().unwrap()
}

#[tokio::test]
async fn long_node_ids_and_type_ids_stay_inside_their_boxes_and_show_whole_on_hover() {
    let _g = SERIAL.lock().await;
    let Some(c) = local().await else { return };
    let base = base_url();
    let ns = namespace(&c.client, "j-webui-labels").await;
    let viewer = sa_with_role(&c, &ns, "viewer", VIEWER_RULES);
    for o in long_labels("labels-run") {
        apply(&c, &ns, &o.to_string());
    }
    let id = run_id(&c, &ns, "labels-run").await;
    // Completed: the widest state word on every box.
    wait_run(&c, &ns, "labels-run", "completed", 120).await;

    let b = Browser::start(&base, false).await;
    b.login(&viewer).await;
    b.goto(&format!("/ui/runs/{id}")).await;
    b.wait_text("#run-status", 60, |t| t == "completed").await;
    for n in ["extract", LONG_ID, "done"] {
        b.wait(
            &format!("#graph g.node[data-node-id='{n}'][data-state='completed']"),
            30,
        )
        .await;
    }
    let g = b.js(MEASURE).await;
    let nodes = g["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{g:#}");

    for n in nodes {
        let nid = n["id"].as_str().unwrap();
        let r = &n["rect"];
        for l in n["labels"].as_array().unwrap() {
            let t = &l["box"];
            assert!(
                num(t, 0) >= num(r, 0) - SLACK
                    && num(t, 2) <= num(r, 2) + SLACK
                    && num(t, 1) >= num(r, 1) - SLACK
                    && num(t, 3) <= num(r, 3) + SLACK,
                "{nid}: label {:?} at {t} runs out of its box {r}",
                l["text"]
            );
        }
        // The hover text names the node and its type in full, whatever the box shows.
        let title = n["title"].as_str().unwrap_or_default();
        assert!(title.contains(nid), "{nid}: title {title:?}");
        if nid != "done" {
            assert!(
                title.contains("core.ai.structuredOutput"),
                "{nid}: title {title:?}"
            );
        }
        // A cut label is a prefix of the whole id and says so with an ellipsis.
        let shown = n["labels"][0]["text"].as_str().unwrap();
        match shown.strip_suffix('…') {
            Some(cut) => assert!(nid.starts_with(cut), "{nid}: shows {shown:?}"),
            None => assert_eq!(shown, nid),
        }
    }
    // The demo's case reads whole: its box is as wide as its label.
    let extract = nodes.iter().find(|n| n["id"] == "extract").unwrap();
    assert_eq!(
        extract["labels"][1]["text"], "completed · ai.structuredOutput",
        "{g:#}"
    );
    // The boxes do not overlap.
    for (i, a) in nodes.iter().enumerate() {
        for z in &nodes[i + 1..] {
            let (p, q) = (&a["rect"], &z["rect"]);
            let apart = num(p, 2) <= num(q, 0)
                || num(q, 2) <= num(p, 0)
                || num(p, 3) <= num(q, 1)
                || num(q, 3) <= num(p, 1);
            assert!(apart, "{} and {} overlap: {p} {q}", a["id"], z["id"]);
        }
    }
    // Each edge leaves its source's right border and enters its target's left border.
    let edges = g["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 2, "{g:#}");
    let rect_of = |id: &Value| {
        &nodes
            .iter()
            .find(|n| &n["id"] == id)
            .unwrap_or_else(|| panic!("edge end {id} is no node: {g:#}"))["rect"]
    };
    for e in edges {
        let (s, t) = (rect_of(&e["source"]), rect_of(&e["target"]));
        let (from, to) = (&e["from"], &e["to"]);
        assert!(
            (num(from, 0) - num(s, 2)).abs() <= 1.0
                && num(from, 1) > num(s, 1)
                && num(from, 1) < num(s, 3),
            "edge {e} does not start on {}'s right border {s}",
            e["source"]
        );
        assert!(
            (num(to, 0) - num(t, 0)).abs() <= 1.0
                && num(to, 1) > num(t, 1)
                && num(to, 1) < num(t, 3),
            "edge {e} does not end on {}'s left border {t}",
            e["target"]
        );
    }
    b.close().await;
    delete_namespace(&c.client, &ns).await;
}
