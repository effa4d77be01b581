//! A run's sub-workflow child and a custom interrupt, through the page: the parent's graph
//! shows its child on the node that started it and navigates to it; the child's page links
//! back; the child's `core.interrupt` of kind `custom` is a card whose data (an XSS canary) is
//! shown as text, whose JSON resume value is checked before it is sent, and which a read-only
//! token can read but not answer.

use super::*;

/// `child-wf`: one custom interrupt (`payment-check`) carrying `payload`; `parent-wf`: a noop,
/// the sub-workflow call waiting for the child, a noop.
pub fn workflows(payload: Value) -> [Value; 2] {
    let child = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "child-wf"},
        "spec": {"id": "child-wf", "name": "child", "version": "1",
            "nodes": [{"id": "gate", "typeId": "core.interrupt",
                "config": {"kind": "custom", "data": {"customKind": "payment-check",
                    "payload": payload}}}]}});
    let parent = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "parent-wf"},
        "spec": {"id": "parent-wf", "name": "parent", "version": "1",
            "nodes": [{"id": "parent-start", "typeId": "core.flow.noop"},
                      {"id": "subwf-call", "typeId": "core.control.subWorkflow",
                       "config": {"workflowId": "child-wf", "waitForCompletion": true}},
                      {"id": "parent-end", "typeId": "core.flow.noop"}],
            "edges": [{"id": "e1", "sourceNodeId": "parent-start", "targetNodeId": "subwf-call"},
                      {"id": "e2", "sourceNodeId": "subwf-call", "targetNodeId": "parent-end"}]}});
    [child, parent]
}

/// A Run of `parent-wf`.
pub fn parent_run(name: &str) -> String {
    json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": name},
        "spec": {"workflowRef": {"name": "parent-wf"}, "timeoutSeconds": 300}})
    .to_string()
}

/// Sets a field's value as typing would (an `input` event), replacing what it held.
async fn set_value(b: &Browser, css: &str, value: &str) {
    b.js(&format!(
        "const el = document.querySelector({css:?}); el.value = {value:?}; el.dispatchEvent(new Event('input', {{bubbles: true}}));"
    ))
    .await;
}

#[tokio::test]
async fn a_parent_shows_its_child_and_a_custom_interrupt_is_answered_through_its_card() {
    let _g = SERIAL.lock().await;
    let Some(c) = local().await else { return };
    let base = base_url();
    let ns = namespace(&c.client, "j-webui-child").await;
    let token = sa_with_role(&c, &ns, "team", TEAM_RULES);
    let viewer = sa_with_role(&c, &ns, "viewer", VIEWER_RULES);
    for wf in workflows(json!({"note": XSS, "amount": 3})) {
        apply(&c, &ns, &wf.to_string());
    }
    apply(&c, &ns, &parent_run("parent-run"));
    let parent = run_id(&c, &ns, "parent-run").await;

    // Read-only first: the child shows on the parent's node; its card shows the data as text
    // and offers no button; a write forged from the page is refused.
    let b = Browser::start(&base, false).await;
    b.login(&viewer).await;
    b.goto(&format!("/ui/runs/{parent}")).await;
    let pill = "#graph a.child-run[data-node-id='subwf-call']";
    let child = b
        .wait(pill, 120)
        .await
        .attr("data-child-run-id")
        .await
        .unwrap()
        .expect("the child's runId on the node");
    b.click(pill).await;
    b.wait(&format!("#run-page[data-run-id='{child}']"), 30)
        .await;
    let card = ".interrupt-card[data-kind='custom'][data-node-id='gate']";
    b.wait(card, 120).await;
    b.wait_text("#run-status", 30, |t| t == "waiting-external")
        .await;
    // The card's subtitle (the custom kind) comes from the run's events, which the page loads
    // after its status: wait for it rather than reading the first render.
    b.wait_text(&format!("{card} h4"), 30, |t| t.contains("payment-check"))
        .await;
    let shown = b
        .wait_text(&format!("{card} .payload"), 30, |t| t.contains("onerror"))
        .await;
    assert!(
        shown.contains("javascript:") && shown.contains("\"amount\": 3"),
        "{shown}"
    );
    // Read-only is said once the page knows it (the tenants list); only then is the absence
    // of the button meaningful.
    b.wait(&format!("{card} p.hint"), 30).await;
    assert_eq!(b.count(&format!("{card} button.resume")).await, 0);
    assert_eq!(
        b.js(&format!(
            "return document.querySelector(\"{card} textarea.resume-value\").readOnly"
        ))
        .await,
        true
    );
    let (code, body) = page_post(
        &b,
        &format!("/v1/runs/{child}/interrupts/gate"),
        &json!({"resumeValue": {"ok": true}}),
        true,
    )
    .await;
    assert_eq!(code, 403, "{body}");
    b.click("#logout").await;
    b.wait("#token", 30).await;

    // The team answers through the card; the value is checked as it is typed.
    b.type_into("#token", &token).await;
    b.click("#login").await;
    b.wait("#runs", 30).await;
    b.goto(&format!("/ui/runs/{child}")).await;
    b.wait(card, 60).await;
    let editor = format!("{card} textarea.resume-value");
    let button = format!("{card} button.resume");
    for (typed, why) in [
        (r#"{"approved": tru"#, "Not JSON"),
        ("[1, 2]", "must be a JSON object"),
        ("null", "must be a JSON object"),
    ] {
        set_value(&b, &editor, typed).await;
        let err = b
            .wait_text(&format!("{card} .resume-error"), 10, |t| !t.is_empty())
            .await;
        assert!(err.contains(why), "{typed}: {err}");
        assert_eq!(
            b.js(&format!(
                "return document.querySelector({button:?}).disabled"
            ))
            .await,
            true,
            "{typed} could be sent"
        );
    }
    set_value(
        &b,
        &editor,
        &json!({"approved": true, "note": XSS}).to_string(),
    )
    .await;
    assert_eq!(b.count(&format!("{card} .resume-error")).await, 0);
    b.click(&button).await;
    b.wait_text("#run-status", 120, |t| t == "completed").await;
    b.wait_text("#resolved", 30, |t| {
        t.contains("interrupt.resolved") && t.contains(" by ")
    })
    .await;
    assert_eq!(b.count(".interrupt-card").await, 0);
    let out = b
        .js("return [...document.querySelectorAll('#timeline .event')].map(e => e.dataset.type)")
        .await;
    assert!(
        out.as_array()
            .unwrap()
            .iter()
            .any(|t| t == "interrupt.resolved"),
        "{out}"
    );
    assert_inert(&b, "interrupt data").await;

    // Back to the parent through the child's link: it completes, and its node shows the
    // child's new phase without a reload.
    b.wait(&format!("#parent-link[data-parent-run-id='{parent}']"), 10)
        .await;
    b.click("#parent-link").await;
    b.wait(&format!("#run-page[data-run-id='{parent}']"), 30)
        .await;
    b.wait(&format!("{pill}[data-status='completed']"), 120)
        .await;
    b.wait_text("#run-status", 120, |t| t == "completed").await;
    b.wait(
        &format!("#node-panel[data-node-id='subwf-call'] .child-link[data-child-run-id='{child}']"),
        30,
    )
    .await;
    b.close().await;
    delete_namespace(&c.client, &ns).await;
}
