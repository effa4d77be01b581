//! The web run viewer (`/ui/`, docs/web-ui.md) in a real browser: headless Chromium from
//! Debian driven over WebDriver, against the operator installed on the mini-cluster by the
//! chart, with runs whose provider calls are scripted (`spec.providerMocks`).
//!
//! Each test logs in with a ServiceAccount token through the page and then does what a person
//! would: watch a run appear and go live to completion, read each attempt of a truncated then
//! retried call, answer a clarification and an approval, cancel a run; a read-only token sees
//! no buttons and its forged writes are refused; model output carrying markup runs nothing;
//! a deep link opens the right node and event; a parent's page shows its sub-workflow child
//! and a custom interrupt is answered through its card (`webui/children.rs`); long node ids
//! and type ids stay inside their graph boxes and read whole on hover (`webui/graph.rs`).
//! Tests run one at a time (one release).

#[path = "webui/browser.rs"]
mod browser;
#[path = "webui/children.rs"]
mod children;
mod common;
#[path = "webui/graph.rs"]
mod graph;
#[path = "webui/kit.rs"]
mod kit;

use std::time::Duration;

use browser::Browser;
use common::*;
use kit::*;
use serde_json::{Value, json};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The UI tests need the operator's port on 127.0.0.1 (pods share the host network).
async fn local() -> Option<openwop_e2e::Cluster> {
    let c = cluster().await;
    if c.skip_unless_local(
        "webui",
        "the operator's HTTP port reachable on 127.0.0.1 (pods share the host network)",
    ) {
        return None;
    }
    Some(setup().await)
}

fn triage() -> String {
    std::fs::read_to_string(repo().join("examples/05-ai-triage.yaml")).unwrap()
}

/// The page's view of one `/v1` write made with the session cookie (the page's own fetch).
async fn page_post(b: &Browser, path: &str, body: &Value, csrf: bool) -> (u64, Value) {
    let script = format!(
        r#"const done = arguments[arguments.length - 1];
        (async () => {{
          const h = {{'Content-Type': 'application/json', Accept: 'application/json'}};
          if ({csrf}) {{
            const s = await (await fetch('/ui/api/session', {{credentials: 'same-origin'}})).json();
            h['X-OpenWOP-CSRF'] = s.csrf;
          }}
          const r = await fetch({path:?}, {{method: 'POST', headers: h, credentials: 'same-origin', body: JSON.stringify({body})}});
          done([r.status, await r.json().catch(() => null)]);
        }})().catch((e) => done([0, String(e)]));"#
    );
    let v = b.js_async(&script).await;
    (v[0].as_u64().unwrap_or(0), v[1].clone())
}

/// Logs in with a bad token then a good one; watches the triage example's run appear in the
/// list and go live; reads both attempts of its truncated-then-retried call; answers its
/// clarification through the card; sees it complete without a reload; reads the reasoning
/// lane; follows a deep link to a node and an event; logs out (the cookie is refused after).
#[tokio::test]
async fn login_follow_a_run_read_its_attempts_answer_and_deep_link() {
    let _g = SERIAL.lock().await;
    let Some(c) = local().await else { return };
    let base = base_url();
    let ns = namespace(&c.client, "j-webui").await;
    let token = sa_with_role(&c, &ns, "team", TEAM_RULES);

    // Served with a strict CSP, no inline script; the SPA answers deep paths.
    let (code, head, body) = http("GET", &format!("{base}/ui/runs/anything"), &[], None);
    assert_eq!(code, 200, "{head}");
    assert!(
        head.contains("content-security-policy: default-src 'self'"),
        "{head}"
    );
    assert!(!head.contains("unsafe-inline"), "{head}");
    assert!(
        body.contains("/ui/assets/app.js") && !body.contains("<script>"),
        "{body}"
    );
    let (code, head, _) = http(
        "GET",
        &format!("{base}/ui/assets/app.js"),
        &["Accept-Encoding: gzip"],
        None,
    );
    assert_eq!(code, 200);
    assert!(
        head.contains("content-encoding: gzip") && head.contains("etag: \""),
        "{head}"
    );
    // A bad token: refused with a specific message that never repeats it.
    let canary = "not-a-token-CANARY-7f3a";
    let (code, _, body) = http(
        "POST",
        &format!("{base}/ui/api/login"),
        &["Content-Type: application/json"],
        Some(&json!({"token": canary}).to_string()),
    );
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("did not accept this token"), "{body}");
    assert!(
        !body.contains(canary),
        "the refusal echoes the token: {body}"
    );

    let b = Browser::start(&base, false).await;
    b.goto("/ui/").await;
    b.type_into("#token", canary).await;
    b.click("#login").await;
    let err = b.wait_text("#login-error", 30, |t| !t.is_empty()).await;
    assert!(err.contains("did not accept this token"), "{err}");
    assert!(
        !err.contains(canary),
        "the page repeats the refused token: {err}"
    );
    b.js("document.getElementById('token').value = ''; document.getElementById('token').dispatchEvent(new Event('input', {bubbles: true}))").await;
    b.type_into("#token", &token).await;
    b.click("#login").await;
    b.wait_text("#user", 30, |t| {
        t.contains(&format!("system:serviceaccount:{ns}:team"))
    })
    .await;
    assert_eq!(
        b.js("return document.cookie").await,
        "",
        "the session cookie is HttpOnly"
    );
    assert!(
        !b.client.source().await.unwrap().contains(&token),
        "the token is in the page"
    );
    let stored = b
        .js("return JSON.stringify(Object.assign({}, localStorage, sessionStorage))")
        .await;
    assert!(
        !stored.as_str().unwrap().contains(&token),
        "the token is in web storage"
    );
    b.wait("#runs", 30).await;
    assert_eq!(b.count("#runs tbody tr").await, 0);

    // The run appears in the list without a reload, and its page follows it live.
    apply(&c, &ns, &triage());
    let id = run_id(&c, &ns, "triage-run").await;
    b.wait(&format!("#runs tr[data-run-id='{id}']"), 60).await;
    b.click(&format!("#runs tr[data-run-id='{id}'] a")).await;
    b.wait("#run-page", 30).await;
    let card = ".interrupt-card[data-kind='clarification'][data-node-id='plan']";
    b.wait(card, 120).await;
    assert_eq!(b.text("#run-status").await.unwrap(), "waiting-input");
    assert!(
        b.wait_text(&format!("{card} h4"), 5, |t| t.contains("plan"))
            .await
            .contains("Clarification")
    );

    // Every attempt of extract's call: truncated at 64 tokens, retried with 128, accepted.
    b.click("#graph g.node[data-node-id='extract']").await;
    b.wait("#attempts tr.attempt[data-attempt='2']", 30).await;
    let rows = b
        .js("return [...document.querySelectorAll('#attempts tr.attempt')].map(r => ({attempt: r.dataset.attempt, outcome: r.dataset.outcome, budget: r.querySelector('.budget').textContent, finish: r.querySelector('.finish').textContent, next: r.querySelector('.next').textContent, text: r.textContent}))")
        .await;
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0]["outcome"], "truncated", "{rows:#?}");
    assert_eq!(rows[0]["budget"], "64", "{rows:#?}");
    assert!(
        rows[0]["next"].as_str().unwrap().contains("retry"),
        "{rows:#?}"
    );
    assert_eq!(rows[1]["outcome"], "accepted", "{rows:#?}");
    assert_eq!(rows[1]["budget"], "128", "{rows:#?}");
    assert!(
        rows[0]["text"].as_str().unwrap().contains("gpt-4o-mini"),
        "{rows:#?}"
    );

    // The clarification answered through the card; the page shows the end without a reload.
    b.type_into(&format!("{card} input[data-question-id='refund']"), "now")
        .await;
    b.click(&format!("{card} button.answer")).await;
    b.wait_text("#run-status", 120, |t| t == "completed").await;
    b.wait(
        "#graph g.node[data-node-id='plan'][data-state='completed']",
        30,
    )
    .await;
    b.wait_text("#resolved", 30, |t| t.contains("clarification.resolved"))
        .await;
    // The reasoning lane, apart from the events.
    b.click("#reasoning summary").await;
    b.wait_text("#reasoning", 30, |t| {
        t.contains("a billing problem") && t.contains("immediate refund")
    })
    .await;
    assert!(
        !b.text("#timeline")
            .await
            .unwrap()
            .contains("a billing problem"),
        "reasoning mixed into the timeline"
    );

    // A deep link to a node and an event (the truncation) opens both.
    let seq = b
        .js("return [...document.querySelectorAll('#timeline .event')].length")
        .await;
    assert!(seq.as_u64().unwrap() > 5, "timeline rows: {seq}");
    let events = b.js_async(&format!(
        "const done = arguments[0]; fetch('/v1/runs/{id}/events?streamMode=debug', {{headers: {{Accept: 'application/json'}}}}).then(r => r.json()).then(j => done(j.events))"
    )).await;
    let truncated = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "envelope.truncated")
        .expect("an envelope.truncated event")["sequence"]
        .as_u64()
        .unwrap();
    b.goto(&format!("/ui/runs/{id}?node=extract&event={truncated}"))
        .await;
    b.wait("#node-panel[data-node-id='extract'] #attempts", 30)
        .await;
    let detail = b
        .wait_text(&format!("#event-detail[data-seq='{truncated}']"), 30, |t| {
            t.contains("envelope.truncated")
        })
        .await;
    assert!(detail.contains("max_tokens"), "{detail}");
    b.wait(
        &format!("#timeline .event.selected[data-seq='{truncated}']"),
        10,
    )
    .await;

    // Log out: the page forgets the session and the server refuses the old cookie.
    let cookie = b.session_cookie().await.expect("a session cookie");
    b.click("#logout").await;
    b.wait("#token", 30).await;
    assert_eq!(b.session_cookie().await, None, "the cookie outlived logout");
    let (code, _, body) = http(
        "GET",
        &format!("{base}/ui/api/session"),
        &[&format!("Cookie: openwop-session={cookie}")],
        None,
    );
    assert_eq!(code, 401, "a logged-out cookie still works: {body}");
    b.close().await;
    delete_namespace(&c.client, &ns).await;
}

/// An agent's write waits for approval: its card names the tool and its tier and shows the
/// arguments (model output, so markup in them stays text); approving it from the card makes
/// the call once; the timeline shows the call and how it returned.
#[tokio::test]
async fn a_tool_call_approval_shows_the_call_and_the_timeline_its_result() {
    use openwop_providers::testing::mcp::{FakeMcp, Knobs};
    let _g = SERIAL.lock().await;
    let Some(c) = local().await else { return };
    let base = base_url();
    let ns = namespace(&c.client, "j-webui-tools").await;
    let token = sa_with_role(&c, &ns, "team", TEAM_RULES);
    let kb = FakeMcp::start(Knobs::default());
    let manifests = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "openwop.dev/v1alpha1", "kind": "ToolServer", "metadata": {"name": "kb"},
         "spec": {"url": kb.url, "toolTiers": [{"name": "lookup", "tier": "read"}]}},
        {"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "noter"},
         "spec": {"id": "noter", "name": "noter", "version": "1", "settings": {"timeout": 0},
                  "nodes": [{"id": "agent", "typeId": "core.ai.callPrompt",
                    "config": {"provider": "mock", "prompt": "note it",
                               "outputSchema": {"type": "object", "required": ["answer"],
                                                "properties": {"answer": {"type": "string"}}},
                               "tools": [{"server": "kb", "names": ["write_note"]}]}}]}},
        {"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": "note-me"},
         "spec": {"workflowRef": {"name": "noter"}, "timeoutSeconds": 300, "providerMocks": {"agent": {"responses": [
            {"stopReason": "tool_calls", "toolCalls": [{"name": "write_note", "arguments": {"text": XSS}}]},
            {"stopReason": "stop", "content": {"answer": "noted"}}]}}}}]});
    apply(&c, &ns, &manifests.to_string());
    let id = run_id(&c, &ns, "note-me").await;
    wait_run(&c, &ns, "note-me", "waiting-approval", 120).await;
    assert_eq!(
        kb.log(|l| l.calls.len()),
        0,
        "nothing is written before the approval"
    );

    let b = Browser::start(&base, false).await;
    b.login(&token).await;
    b.goto(&format!("/ui/runs/{id}")).await;
    let card = ".interrupt-card[data-kind='approval'][data-node-id='agent']";
    b.wait(
        &format!("{card} .tool-call[data-tool-id='mcp:kb/write_note']"),
        60,
    )
    .await;
    let shown = b.text(&format!("{card} .tool-call")).await.unwrap();
    assert!(
        shown.contains("mcp:kb/write_note") && shown.contains("write"),
        "{shown}"
    );
    assert!(
        shown.contains("onerror"),
        "the arguments are shown as text: {shown}"
    );
    assert_inert(&b, "tool-call arguments").await;
    b.wait(&format!("{card} button.approve"), 30).await;
    b.click(&format!("{card} button.approve")).await;
    b.wait_text("#run-status", 120, |t| t == "completed").await;
    assert_eq!(kb.log(|l| l.calls.len()), 1, "approved once, called once");
    b.wait_text("#timeline", 30, |t| {
        t.contains("agent.toolReturned") && t.contains("mcp:kb/write_note ok")
    })
    .await;
    b.close().await;
    delete_namespace(&c.client, &ns).await;
}

fn approval_run(name: &str) -> String {
    let wf =
        std::fs::read_to_string(repo().join("examples/02-conformance-mock-agent.yaml")).unwrap();
    let run = wf.split("\n---").nth(1).expect("the example's Run");
    run.replace("name: mock-agent-run", &format!("name: {name}"))
}

fn slow_run(name: &str, delay_ms: u64) -> String {
    json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": name},
        "spec": {"workflowRef": {"name": "slow"}, "timeoutSeconds": 300, "providerMocks": {"q": {"responses": [
            {"stopReason": "stop", "delayMs": delay_ms,
             "content": {"type": "vendor.acme.plan", "payload": {"region": "eu"}}}]}}}})
    .to_string()
}

const XSS: &str = r#"<img src=x onerror="window.__openwopXss='img'"><a href="javascript:window.__openwopXss='link'">click me</a><script>window.__openwopXss='script'</script>"#;

/// Asserts that nothing of [`XSS`] the page was given as `what` became markup or ran.
async fn assert_inert(b: &Browser, what: &str) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let probe = b
        .js("return {flag: window.__openwopXss === undefined ? null : window.__openwopXss, imgs: document.querySelectorAll('main img').length, scripts: [...document.scripts].filter(s => !s.src).length, jsLinks: document.querySelectorAll('a[href^=\"javascript:\"]').length}")
        .await;
    assert_eq!(
        probe,
        json!({"flag": null, "imgs": 0, "scripts": 0, "jsLinks": 0}),
        "{what} became markup"
    );
}

/// Approves an approval through its card (with a comment), cancels a run after confirming, and
/// checks a read-only token: no buttons, and writes it forges from the page are refused (no
/// CSRF proof: 403; with it: RBAC's 403). Model output carrying markup renders as text and
/// runs nothing.
#[tokio::test]
async fn approve_cancel_read_only_and_model_output_is_text() {
    let _g = SERIAL.lock().await;
    let Some(c) = local().await else { return };
    let base = base_url();
    let ns = namespace(&c.client, "j-webui-act").await;
    let token = sa_with_role(&c, &ns, "team", TEAM_RULES);
    let viewer = sa_with_role(&c, &ns, "viewer", VIEWER_RULES);
    let wf =
        std::fs::read_to_string(repo().join("examples/02-conformance-mock-agent.yaml")).unwrap();
    apply(&c, &ns, wf.split("\n---").next().unwrap());
    let slow = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "slow"},
        "spec": {"id": "slow", "name": "slow", "version": "1", "nodes": [{"id": "q", "typeId": "core.ai.callPrompt",
            "config": {"provider": "mock", "prompt": "plan", "envelopeType": "vendor.acme.plan"}}]}});
    apply(&c, &ns, &slow.to_string());
    let xss_wf = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "echo"},
        "spec": {"id": "echo", "name": "echo", "version": "1", "nodes": [{"id": "say", "typeId": "core.ai.callPrompt",
            "config": {"provider": "mock", "prompt": "say it", "envelopeType": "vendor.acme.note"}}]}});
    apply(&c, &ns, &xss_wf.to_string());
    let review = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "review"},
        "spec": {"id": "review", "name": "review", "version": "1", "settings": {"timeout": 0},
            "nodes": [{"id": "gate", "typeId": "core.approvalGate",
                       "config": {"title": "Review the draft", "actions": ["accept", "refine"]}}]}});
    apply(&c, &ns, &review.to_string());
    apply(&c, &ns, &approval_run("approve-me"));
    apply(&c, &ns, &approval_run("leave-me"));
    let refine_run = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": "refine-me"},
        "spec": {"workflowRef": {"name": "review"}, "timeoutSeconds": 300}});
    apply(&c, &ns, &refine_run.to_string());
    apply(&c, &ns, &slow_run("cancel-me", 120_000));
    let xss_run = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": "xss"},
        "spec": {"workflowRef": {"name": "echo"}, "timeoutSeconds": 300, "providerMocks": {"say": {"responses": [
            {"stopReason": "stop", "content": {"type": "vendor.acme.note",
              "payload": {"text": XSS, "reasoning": XSS}}}]}}}});
    apply(&c, &ns, &xss_run.to_string());
    let approve_id = run_id(&c, &ns, "approve-me").await;
    let leave_id = run_id(&c, &ns, "leave-me").await;
    let cancel_id = run_id(&c, &ns, "cancel-me").await;
    let xss_id = run_id(&c, &ns, "xss").await;
    wait_run(&c, &ns, "approve-me", "waiting-approval", 120).await;
    wait_run(&c, &ns, "leave-me", "waiting-approval", 120).await;

    let b = Browser::start(&base, false).await;
    b.login(&token).await;
    // Approve with a comment.
    b.goto(&format!("/ui/runs/{approve_id}")).await;
    let card = ".interrupt-card[data-kind='approval'][data-node-id='agent']";
    b.wait(card, 60).await;
    b.type_into(&format!("{card} textarea.comment"), "looks right")
        .await;
    b.click(&format!("{card} button.approve")).await;
    b.wait_text("#run-status", 120, |t| t == "completed").await;
    b.wait_text("#resolved", 30, |t| {
        t.contains("approval.received") && t.contains(" by ")
    })
    .await;
    assert_eq!(b.count(".interrupt-card").await, 0);

    // A gate offering accept and refine shows exactly those; a refine is sent only with its
    // feedback, and the resolution lists it.
    let refine_id = run_id(&c, &ns, "refine-me").await;
    wait_run(&c, &ns, "refine-me", "waiting-approval", 120).await;
    b.goto(&format!("/ui/runs/{refine_id}")).await;
    let card = ".interrupt-card[data-kind='approval'][data-node-id='gate']";
    b.wait(card, 60).await;
    // The buttons come once the page knows this token may answer (the tenants list).
    b.wait(&format!("{card} button[data-action]"), 30).await;
    let offered = b
        .js(&format!(
            "return [...document.querySelectorAll(\"{card} button[data-action]\")].map(b => b.dataset.action)"
        ))
        .await;
    assert_eq!(offered, json!(["accept", "refine"]));
    b.click(&format!("{card} button.refine")).await;
    b.wait(&format!("{card} .action-error"), 10).await;
    assert_eq!(
        b.js(&format!(
            "return document.querySelector(\"{card} button.send-action\").disabled"
        ))
        .await,
        json!(true),
        "a refine without feedback can be sent"
    );
    b.js(&format!(
        "const s = document.querySelector(\"{card} select.refine-scope\"); s.value = 'section'; \
         s.dispatchEvent(new Event('change', {{bubbles: true}}))"
    ))
    .await;
    b.type_into(&format!("{card} input.refine-section"), "intro")
        .await;
    b.type_into(
        &format!("{card} textarea.refine-feedback"),
        "tighten the intro",
    )
    .await;
    b.click(&format!("{card} button.send-action")).await;
    b.wait_text("#run-status", 120, |t| t == "completed").await;
    b.wait_text("#resolved", 30, |t| {
        t.contains("approval.received (refine)") && t.contains("changes: “tighten the intro”")
    })
    .await;

    // Cancel, after confirming.
    b.goto(&format!("/ui/runs/{cancel_id}")).await;
    b.wait_text("#run-status", 120, |t| t == "running").await;
    b.click("#cancel").await;
    b.wait("#cancel-dialog", 10).await;
    assert!(
        b.text("#run-status").await.unwrap() == "running",
        "cancelled before confirming"
    );
    b.click("#confirm-cancel").await;
    b.wait_text("#run-status", 120, |t| t == "cancelled").await;
    wait_run(&c, &ns, "cancel-me", "cancelled", 30).await;

    // Model output with markup: shown as text, nothing runs, no element made of it.
    b.goto(&format!("/ui/runs/{xss_id}?node=say")).await;
    b.wait_text("#run-status", 120, |t| t == "completed").await;
    b.wait_text("#node-panel", 30, |t| t.contains("onerror"))
        .await;
    b.click("#reasoning summary").await;
    b.wait_text("#reasoning", 30, |t| t.contains("javascript:"))
        .await;
    let seq = b
        .js("return [...document.querySelectorAll('#timeline .event')].map(e => e.dataset.seq)")
        .await;
    let last = seq
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    b.click(&format!("#timeline .event[data-seq='{last}']"))
        .await;
    b.wait_text("#event-detail", 10, |t| t.contains("<img src=x"))
        .await;
    assert_inert(&b, "model output").await;
    b.click("#logout").await;
    b.wait("#token", 30).await;

    // Read-only: no buttons; forged writes refused by the server; the run still waits.
    b.type_into("#token", &viewer).await;
    b.click("#login").await;
    b.wait("#runs", 30).await;
    b.wait("#read-only", 30).await;
    b.goto(&format!("/ui/runs/{leave_id}")).await;
    b.wait(".interrupt-card[data-kind='approval']", 60).await;
    // Read-only is said once the page knows it (the tenants list), not before.
    b.wait(".interrupt-card[data-kind='approval'] p.hint", 30)
        .await;
    b.wait("#download", 10).await;
    for css in [
        "#cancel",
        "button.approve",
        "button.reject",
        "button.answer",
    ] {
        assert_eq!(b.count(css).await, 0, "a read-only token sees {css}");
    }
    let (code, body) = page_post(
        &b,
        &format!("/v1/runs/{leave_id}/cancel"),
        &json!({}),
        false,
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("x-openwop-csrf"),
        "{body}"
    );
    let (code, body) =
        page_post(&b, &format!("/v1/runs/{leave_id}/cancel"), &json!({}), true).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["details"]["verb"], "patch", "{body}");
    let (code, body) = page_post(
        &b,
        &format!("/v1/runs/{leave_id}/interrupts/agent"),
        &json!({"resumeValue": {"action": "accept"}}),
        true,
    )
    .await;
    assert_eq!(code, 403, "{body}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_run(&c, &ns, "leave-me", "waiting-approval", 5).await;
    b.close().await;
    delete_namespace(&c.client, &ns).await;
}

/// `make screenshots`: the pictures of docs/web-ui.md (docs/webui/*.png) from a real run of each kind,
/// in light and dark.
#[tokio::test]
#[ignore = "regenerates docs/webui/*.png: make screenshots"]
async fn screenshots() {
    let _g = SERIAL.lock().await;
    let Some(c) = local().await else { return };
    let base = base_url();
    let ns = namespace(&c.client, "j-webui-demo").await;
    let token = sa_with_role(&c, &ns, "team", TEAM_RULES);
    let wf =
        std::fs::read_to_string(repo().join("examples/02-conformance-mock-agent.yaml")).unwrap();
    apply(&c, &ns, wf.split("\n---").next().unwrap());
    apply(&c, &ns, &triage());
    apply(&c, &ns, &approval_run("refund-approval"));
    for wf in children::workflows(
        json!({"invoice": "INV-2291", "amount": 1250.0, "currency": "EUR", "ask": "Confirm the bank transfer arrived"}),
    ) {
        apply(&c, &ns, &wf.to_string());
    }
    apply(&c, &ns, &children::parent_run("payment-run"));
    let parent = run_id(&c, &ns, "payment-run").await;
    let id = run_id(&c, &ns, "triage-run").await;
    let approval = run_id(&c, &ns, "refund-approval").await;
    wait_run(&c, &ns, "refund-approval", "waiting-approval", 120).await;
    let st = wait_run(&c, &ns, "triage-run", "waiting-input", 120).await;
    let answer = json!({"spec": {"answers": [{"interruptId": st["pendingInterrupts"][0]["interruptId"], "value": {"refund": "now"}}]}});
    ok(
        kubectl(
            &c,
            &[
                "patch",
                "run",
                "triage-run",
                "-n",
                &ns,
                "--type=merge",
                "-p",
                &answer.to_string(),
            ],
            None,
        ),
        "answer the clarification",
    );
    wait_run(&c, &ns, "triage-run", "completed", 120).await;
    let dir = repo().join("docs/webui");
    std::fs::create_dir_all(&dir).unwrap();

    let b = Browser::start(&base, false).await;
    b.login(&token).await;
    b.wait(&format!("#runs tr[data-run-id='{approval}']"), 60)
        .await;
    b.screenshot(&dir.join("runs.png")).await;
    b.goto(&format!("/ui/runs/{id}?node=extract")).await;
    b.wait_text("#run-status", 60, |t| t == "completed").await;
    b.wait("#attempts tr.attempt[data-attempt='2']", 30).await;
    b.click("#reasoning summary").await;
    b.wait_text("#reasoning", 30, |t| t.contains("immediate refund"))
        .await;
    b.screenshot(&dir.join("run.png")).await;
    let panel = b.wait("#node-panel", 10).await;
    std::fs::write(dir.join("attempts.png"), panel.screenshot().await.unwrap()).unwrap();
    b.close().await;

    // Dark: from prefers-color-scheme (the browser asks for dark).
    let b = Browser::start(&base, true).await;
    b.login(&token).await;
    assert_eq!(
        b.js("return document.documentElement.dataset.theme").await,
        "dark",
        "prefers-color-scheme: dark is not followed"
    );
    b.goto(&format!("/ui/runs/{approval}?node=agent")).await;
    b.wait(".interrupt-card[data-kind='approval']", 60).await;
    b.type_into(
        ".interrupt-card textarea.comment",
        "Refund approved: duplicate charge confirmed.",
    )
    .await;
    b.screenshot(&dir.join("approval-dark.png")).await;
    b.close().await;

    // A sub-workflow's child on its parent's node, and the child's custom interrupt.
    let b = Browser::start(&base, false).await;
    b.login(&token).await;
    b.goto(&format!("/ui/runs/{parent}?node=subwf-call")).await;
    let pill = "#graph a.child-run[data-node-id='subwf-call'][data-status='waiting-external']";
    b.wait(pill, 120).await;
    b.screenshot(&dir.join("sub-workflow.png")).await;
    b.click(pill).await;
    b.wait(".interrupt-card[data-kind='custom']", 60).await;
    b.screenshot(&dir.join("custom-interrupt.png")).await;
    b.close().await;
    delete_namespace(&c.client, &ns).await;
    println!("screenshots written to {}", dir.display());
}

/// A run of `n` synthetic events (50 nodes, each started, logged and completed in turn) on the
/// subject of a Run waiting for a Workflow that never comes: what the page reads is exactly
/// what a worker would have published.
async fn synthetic_run(c: &openwop_e2e::Cluster, ns: &str, name: &str, n: u64) -> String {
    let run = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": name},
        "spec": {"workflowRef": {"name": "never-applied"}}});
    apply(c, ns, &run.to_string());
    let id = run_id(c, ns, name).await;
    let nats = async_nats::connect(&c.nats_url).await.expect("NATS");
    let js = async_nats::jetstream::new(nats);
    let subject = format!("openwop.events.{ns}.{id}");
    let mut acks = Vec::new();
    for seq in 0..n {
        let node = format!("n{:02}", (seq / 20) % 50);
        let (t, payload) = match seq {
            0 => ("run.started", json!({"workflowId": "bench"})),
            s if s == n - 1 => ("run.completed", json!({"outputs": {}})),
            s if s % 20 == 1 => (
                "node.started",
                json!({"nodeId": node, "typeId": "core.identity", "attempt": 1}),
            ),
            s if s % 20 == 0 => (
                "node.completed",
                json!({"nodeId": node, "outputs": {"output": {"i": s}}}),
            ),
            s => (
                "log.appended",
                json!({"level": "info", "nodeId": node, "message": format!("step {s} of the bench run"), "fields": {"i": s}}),
            ),
        };
        let doc = json!({"eventId": format!("evt-bench-{id}-{seq}"), "runId": id, "type": t,
            "payload": payload, "timestamp": "2026-01-01T00:00:00Z", "sequence": seq,
            "nodeId": if seq == 0 || seq == n - 1 { Value::Null } else { json!(node) }});
        acks.push(
            js.publish(subject.clone(), doc.to_string().into())
                .await
                .expect("publish"),
        );
        if acks.len() >= 500 {
            for a in acks.drain(..) {
                a.await.expect("ack");
            }
        }
    }
    for a in acks {
        a.await.expect("ack");
    }
    id
}

/// Milliseconds since navigation until `done()` (a JS condition) holds, first contentful
/// paint, the JS heap, and frame intervals while scrolling `scroller` top to bottom.
async fn page_figures(b: &Browser, done: &str, scroller: Option<&str>) -> Value {
    let scroll = scroller.map_or("null".to_owned(), |s| format!("{s:?}"));
    let script = format!(
        r#"const cb = arguments[arguments.length - 1];
        const t0 = performance.now();
        const ready = () => {{ try {{ return {done}; }} catch (e) {{ return false; }} }};
        const wait = () => new Promise((res) => {{ const f = () => ready() ? res() : (performance.now() - t0 > 120000 ? res() : requestAnimationFrame(f)); f(); }});
        (async () => {{
          await wait();
          const rendered = performance.now();
          const fcp = (performance.getEntriesByName('first-contentful-paint')[0] || {{}}).startTime || null;
          const heap = performance.memory ? performance.memory.usedJSHeapSize : null;
          let frames = null;
          const el = {scroll} && document.querySelector({scroll});
          if (el) {{
            const gaps = []; let last = performance.now();
            const steps = 120; const max = el.scrollHeight - el.clientHeight;
            for (let i = 1; i <= steps; i++) {{
              el.scrollTop = max * i / steps;
              await new Promise((r) => requestAnimationFrame(r));
              const now = performance.now(); gaps.push(now - last); last = now;
            }}
            gaps.sort((a, b) => a - b);
            frames = {{p50: gaps[Math.floor(gaps.length * 0.5)], p95: gaps[Math.floor(gaps.length * 0.95)], max: gaps[gaps.length - 1], rows: el.querySelectorAll('.event').length}};
          }}
          cb({{ready: ready(), renderedMs: rendered, fcpMs: fcp, heapBytes: heap, scroll: frames}});
        }})();"#
    );
    b.js_async(&script).await
}

/// Waits until `GET /v1/runs` (at `url`, with `auth`) counts at least `want` Runs.
async fn wait_listed(url: &str, auth: &str, want: usize) {
    wait_for(
        Duration::from_secs(600),
        &format!("{want} Runs in the operator's cache"),
        || async move {
            let (code, _, body) = http("GET", url, &[auth], None);
            let v: Value = serde_json::from_str(&body).ok()?;
            (code == 200 && v["total"].as_u64()? as usize >= want).then_some(())
        },
    )
    .await
}

/// `make bench`: time to first paint and to a fully rendered timeline for a 1,000- and a
/// 10,000-event run, the JS heap, scrolling frame times; the runs list page with
/// `OPENWOP_WEBUI_BENCH_RUNS` (default 5,000) Runs in one namespace. Those Runs are made cheap:
/// each mocks a node its tiny workflow lacks, so the operator refuses it at its first
/// reconcile (phase `failed`, no pod, never requeued), and they are created 250 at a time,
/// each batch once the operator lists the one before. Runs waiting for a Workflow that never
/// comes are requeued every 30 s, and 5,000 of those created at once starved the operator's
/// leader-lease renewal on the shared 2-core machine. Prints FIGURES lines.
#[tokio::test]
#[ignore = "figures: make bench"]
async fn figures() {
    let _g = SERIAL.lock().await;
    let Some(c) = local().await else { return };
    let base = base_url();
    let ns = namespace(&c.client, "j-webui-bench").await;
    let token = sa_with_role(&c, &ns, "team", TEAM_RULES);
    let b = Browser::start(&base, false).await;
    b.login(&token).await;
    for n in [1_000u64, 10_000] {
        let id = synthetic_run(&c, &ns, &format!("bench-{n}"), n).await;
        // Warm: the first read of a subject opens its consumer.
        b.goto(&format!("/ui/runs/{id}")).await;
        b.wait_text(".timeline-pane .count", 120, |t| t == format!("{n} events"))
            .await;
        for round in 0..3 {
            b.goto(&format!("/ui/runs/{id}")).await;
            let f = page_figures(
                &b,
                &format!("document.querySelector('.timeline-pane .count') && document.querySelector('.timeline-pane .count').textContent === '{n} events' && document.querySelectorAll('#timeline .event').length > 0"),
                Some("#timeline"),
            )
            .await;
            assert_eq!(f["ready"], true, "{f}");
            println!("FIGURES webui timeline events={n} round={round} {f}");
        }
    }
    let runs: usize = std::env::var("OPENWOP_WEBUI_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let tiny = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "tiny"},
        "spec": {"id": "tiny", "name": "tiny", "version": "1", "nodes": [{"id": "only", "typeId": "core.flow.noop"}]}});
    apply(&c, &ns, &tiny.to_string());
    let url = format!("{base}/v1/runs?tenantId={ns}&limit=50");
    let auth = format!("Authorization: Bearer {token}");
    let created = std::time::Instant::now();
    let mut made = 0;
    while made < runs {
        let batch: Vec<Value> = (made..(made + 250).min(runs))
            .map(|i| {
                json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
                "metadata": {"name": format!("many-{i:05}")},
                "spec": {"workflowRef": {"name": "tiny"},
                         "providerMocks": {"no-such-node": {"responses": [{"stopReason": "stop", "content": {}}]}}}})
            })
            .collect();
        made += batch.len();
        apply(
            &c,
            &ns,
            &json!({"apiVersion": "v1", "kind": "List", "items": batch}).to_string(),
        );
        wait_listed(&url, &auth, made + 2).await;
    }
    let total = runs + 2;
    // Every one refused (failed), so nothing churns while the page is timed.
    let failed = format!("{base}/v1/runs?tenantId={ns}&status=failed&limit=1");
    wait_listed(&failed, &auth, runs).await;
    println!(
        "FIGURES webui created {runs} Runs, all listed and refused, in {:.0} s",
        created.elapsed().as_secs_f64()
    );
    let mut api_ms = Vec::new();
    for _ in 0..20 {
        let t = std::time::Instant::now();
        let (code, _, _) = http("GET", &url, &[&auth], None);
        api_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(code, 200);
    }
    api_ms.sort_by(f64::total_cmp);
    println!(
        "FIGURES webui GET /v1/runs limit=50 of {total} runs (curl, 20 requests): p50 {:.1} ms, max {:.1} ms",
        api_ms[10], api_ms[19]
    );
    for round in 0..3 {
        b.goto(&format!("/ui/?tenant={ns}")).await;
        let f = page_figures(
            &b,
            &format!("document.querySelectorAll('#runs tbody tr').length === 50 && document.getElementById('total').textContent === '{total} runs'"),
            None,
        )
        .await;
        assert_eq!(f["ready"], true, "{f}");
        println!("FIGURES webui runs list runs={total} round={round} {f}");
    }
    b.close().await;
    delete_namespace(&c.client, &ns).await;
}
