//! The tool loop of an LLM node on an in-memory log, against the fake MCP server
//! (`providers::testing::mcp::FakeMcp`, which counts every call it runs) and a scripted
//! model: results go back to the model wrapped as untrusted, a write waits for a person
//! holding no pod, a replayed or restarted run never makes a recorded call again, and a call
//! cut off by a kill follows the kill rule of its tier.

use openwop_protocol::events::RunEventDoc;
use openwop_providers::testing::mcp::{FakeMcp, Knobs};
use openwop_providers::tools::ToolTurn;
use serde_json::{Value, json};

use super::tests::{Outcome, assert_gapless, run_snapshot};
use super::*;

fn agent(tools: Value, extra: Value) -> Value {
    let mut config = json!({
        "provider": "mock", "prompt": "Answer the question.",
        "outputSchema": {"type": "object", "properties": {"answer": {"type": "string"}},
                         "required": ["answer"]},
        "tools": tools,
    });
    if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    json!({"id": "w", "nodes": [{"id": "agent", "typeId": "core.ai.callPrompt", "config": config}],
           "edges": [], "settings": {"timeout": 0}})
}

fn asks(calls: Value) -> Value {
    json!({"stopReason": "tool_calls", "toolCalls": calls})
}

fn answers(text: &str) -> Value {
    json!({"stopReason": "stop", "content": {"answer": text}})
}

/// Runs (or replays over `existing`) `workflow` with the scripted model `responses`, the
/// server `kb` at `fake`, and `answers`.
fn run_with(
    fake: &FakeMcp,
    workflow: &Value,
    responses: Value,
    answers: Value,
    existing: Vec<RunEventDoc>,
) -> Outcome {
    run_snapshot(
        json!({
            "run": {"namespace": "ns", "name": "r", "runId": "run-1"},
            "workflow": workflow, "answers": answers,
            "providerMocks": {"agent": {"responses": responses}},
            "toolServers": [{"name": "kb", "namespace": "ns", "url": fake.url,
                             "timeoutSeconds": 1, "maxResultBytes": 4096,
                             "toolTiers": [{"name": "lookup", "tier": "read"},
                                           {"name": "huge", "tier": "read"},
                                           {"name": "slow", "tier": "read"}]}],
        }),
        existing,
    )
}

fn calls_at(fake: &FakeMcp) -> Vec<String> {
    fake.log(|l| l.calls.iter().map(|(t, _)| t.clone()).collect())
}

fn of_type(events: &[RunEventDoc], t: EventType) -> Vec<&RunEventDoc> {
    events.iter().filter(|e| e.event_type == t).collect()
}

fn ids(events: &[RunEventDoc]) -> Vec<String> {
    events.iter().map(|e| e.event_id.clone()).collect()
}

/// The results the model was given on its last call.
fn last_results(o: &Outcome) -> Vec<openwop_providers::tools::ToolResult> {
    let last = o.mock_calls.last().expect("the model was called");
    match last.turns.last() {
        Some(ToolTurn::Results(r)) => r.clone(),
        other => panic!("the last call carried no results: {other:?}"),
    }
}

#[test]
fn a_read_tool_is_called_once_and_its_result_goes_back_to_the_model_as_untrusted() {
    let fake = FakeMcp::start(Knobs::default());
    let wf = agent(json!([{"server": "kb", "names": ["lookup"]}]), json!({}));
    let script = json!([
        asks(json!([{"name": "lookup", "arguments": {"query": "rust"}, "id": "c-1"}])),
        answers("rust is found")
    ]);
    let o = run_with(&fake, &wf, script.clone(), json!([]), vec![]);
    assert_eq!(o.end, RunEnd::Completed, "{:?}", o.events);
    assert_gapless(&o.events);
    assert_eq!(calls_at(&fake), ["lookup"]);
    // Offered by name, called, and answered: the model read the result as untrusted.
    assert_eq!(o.mock_calls[0].tools, ["lookup"]);
    let results = last_results(&o);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].call_id, "c-1");
    assert!(
        results[0].content.starts_with("<UNTRUSTED tool=\"lookup\"")
            && results[0].content.contains("found: rust"),
        "{}",
        results[0].content
    );
    let called = of_type(&o.events, EventType::AgentToolCalled);
    let returned = of_type(&o.events, EventType::AgentToolReturned);
    assert_eq!((called.len(), returned.len()), (1, 1));
    assert_eq!(
        returned[0].causation_id.as_deref(),
        Some(called[0].event_id.as_str())
    );
    assert_eq!(called[0].payload["toolId"], "mcp:kb/lookup");
    assert_eq!(called[0].payload["safetyTier"], "read");
    assert_eq!(called[0].payload["transport"], "mcp");
    assert!(called[0].payload["argsHash"].as_str().unwrap().len() == 64);
    assert_eq!(returned[0].payload["status"], "ok");
    assert_eq!(returned[0].payload["outcome"], "found: rust");
    assert!(returned[0].payload["durationMs"].is_u64());
    let output = &of_type(&o.events, EventType::NodeCompleted)[0].payload;
    assert_eq!(
        output["outputs"]["output"]["answer"], "rust is found",
        "{output}"
    );

    // A replay of the whole log makes no call and asks the model nothing.
    let again = run_with(&fake, &wf, script.clone(), json!([]), o.events.clone());
    assert_eq!(again.end, RunEnd::Completed);
    assert_eq!(ids(&again.events), ids(&o.events));
    assert!(again.calls.is_empty(), "{:?}", again.calls);
    assert_eq!(calls_at(&fake), ["lookup"]);

    // A worker killed after any event: the same log; the read is made again only when its
    // return was lost (after `agent.toolCalled`, before `agent.toolReturned`).
    let called_at = o
        .events
        .iter()
        .position(|e| e.event_type == EventType::AgentToolCalled)
        .unwrap();
    for k in 0..o.events.len() {
        let before = calls_at(&fake).len();
        let again = run_with(
            &fake,
            &wf,
            script.clone(),
            json!([]),
            o.events[..k].to_vec(),
        );
        assert_eq!(again.end, RunEnd::Completed, "killed after {k}");
        assert_eq!(ids(&again.events), ids(&o.events), "killed after {k}");
        let made = calls_at(&fake).len() - before;
        assert_eq!(made, usize::from(k <= called_at + 1), "killed after {k}");
    }
}

#[test]
fn a_write_tool_waits_for_approval_holding_no_pod_then_runs_once_on_accept() {
    let fake = FakeMcp::start(Knobs::default());
    let wf = agent(json!([{"server": "kb"}]), json!({}));
    let script = json!([
        asks(json!([{"name": "write_note", "arguments": {"text": "hello"}}])),
        answers("noted")
    ]);
    let first = run_with(&fake, &wf, script.clone(), json!([]), vec![]);
    let RunEnd::Suspended(waiting) = &first.end else {
        panic!("{:?}", first.end)
    };
    assert_eq!(waiting[0].kind, InterruptKind::Approval);
    let interrupt = waiting[0].interrupt_id.clone();
    assert!(
        calls_at(&fake).is_empty(),
        "nothing is written before the approval"
    );
    let requested = &of_type(&first.events, EventType::InterruptRequested)[0].payload;
    assert_eq!(requested["data"]["artifactType"], "tool-call");
    assert_eq!(requested["data"]["toolCall"]["toolId"], "mcp:kb/write_note");
    assert_eq!(requested["data"]["toolCall"]["safetyTier"], "write");
    assert_eq!(
        requested["data"]["toolCall"]["arguments"],
        json!({"text": "hello"})
    );
    assert!(of_type(&first.events, EventType::AgentToolCalled).is_empty());

    // Accepted: the next worker replays to the call, makes it once and finishes.
    let accept = json!([{"interruptId": interrupt, "action": "accept", "answeredBy": "ana"}]);
    let done = run_with(
        &fake,
        &wf,
        script.clone(),
        accept.clone(),
        first.events.clone(),
    );
    assert_eq!(done.end, RunEnd::Completed, "{:?}", done.events);
    assert_gapless(&done.events);
    assert_eq!(calls_at(&fake), ["write_note"]);
    assert_eq!(
        done.calls.len(),
        1,
        "the first turn came from the log: {:?}",
        done.calls
    );
    assert!(last_results(&done)[0].content.contains("noted: hello"));
    let received = &of_type(&done.events, EventType::ApprovalReceived)[0].payload;
    assert_eq!(received["action"], "accept");

    // A worker killed after any event of the accepted run's log: the write is made exactly
    // once overall — again only if it was never recorded as made; recorded as made without
    // its return, it is never repeated (below).
    let called_at = done
        .events
        .iter()
        .position(|e| e.event_type == EventType::AgentToolCalled)
        .unwrap();
    for k in first.events.len()..done.events.len() {
        if k == called_at + 1 {
            continue;
        }
        let before = calls_at(&fake).len();
        let again = run_with(
            &fake,
            &wf,
            script.clone(),
            accept.clone(),
            done.events[..k].to_vec(),
        );
        assert_eq!(again.end, RunEnd::Completed, "killed after {k}");
        assert_eq!(ids(&again.events), ids(&done.events), "killed after {k}");
        let made = calls_at(&fake).len() - before;
        assert_eq!(made, usize::from(k <= called_at), "killed after {k}");
    }
    let writes_before = calls_at(&fake).len();

    // Killed while the write was in flight: never made again; the model is told.
    let cut = run_with(
        &fake,
        &wf,
        script.clone(),
        accept.clone(),
        done.events[..=called_at].to_vec(),
    );
    assert_eq!(cut.end, RunEnd::Completed);
    assert_eq!(
        calls_at(&fake).len(),
        writes_before,
        "a write's unknown outcome is not repeated"
    );
    let returned = &of_type(&cut.events, EventType::AgentToolReturned)[0].payload;
    assert_eq!(returned["error"]["code"], "tool_outcome_unknown");
    assert!(
        last_results(&cut)[0]
            .content
            .contains("may or may not have taken effect")
    );

    // Rejected: no call; the model reads the refusal and answers.
    let fake2 = FakeMcp::start(Knobs::default());
    let reject = json!([{"interruptId": interrupt, "action": "reject", "answeredBy": "ana"}]);
    let no = run_with(&fake2, &wf, script.clone(), reject, first.events.clone());
    assert_eq!(no.end, RunEnd::Completed);
    assert!(calls_at(&fake2).is_empty());
    let returned = &of_type(&no.events, EventType::AgentToolReturned)[0].payload;
    assert_eq!(returned["status"], "forbidden");
    assert_eq!(returned["error"]["details"]["reason"], "approval-rejected");

    // Tool output never answers the approval: an untrusted answer keeps it waiting.
    let untrusted =
        json!([{"interruptId": interrupt, "action": "accept", "contentTrust": "untrusted"}]);
    let still = run_with(&fake2, &wf, script, untrusted, first.events.clone());
    assert!(matches!(still.end, RunEnd::Suspended(_)), "{:?}", still.end);
    assert!(calls_at(&fake2).is_empty());
}

#[test]
fn calls_outside_the_allowlist_are_refused_to_the_model_and_errors_go_back_as_errors() {
    let fake = FakeMcp::start(Knobs::default());
    let wf = agent(
        json!([{"server": "kb", "names": ["lookup", "fail"], "requireApproval": false}]),
        json!({}),
    );
    let script = json!([
        asks(json!([
            {"name": "write_note", "arguments": {"text": "x"}},
            {"name": "lookup", "arguments": "not json"},
            {"name": "fail", "arguments": {}},
        ])),
        answers("done")
    ]);
    let o = run_with(&fake, &wf, script, json!([]), vec![]);
    assert_eq!(o.end, RunEnd::Completed, "{:?}", o.events);
    assert_eq!(
        calls_at(&fake),
        ["fail"],
        "only the offered, well-formed call is made"
    );
    let results = last_results(&o);
    assert!(results[0].is_error && results[0].content.contains("the tools you may call are"));
    assert!(results[1].is_error && results[1].content.contains("not valid JSON"));
    assert!(results[2].is_error && results[2].content.contains("the tool failed"));
    let statuses: Vec<Value> = of_type(&o.events, EventType::AgentToolReturned)
        .iter()
        .map(|e| e.payload["status"].clone())
        .collect();
    assert_eq!(
        statuses,
        [json!("forbidden"), json!("forbidden"), json!("error")]
    );
}

#[test]
fn a_huge_result_is_cut_head_and_tail_and_rounds_beyond_the_cap_fail_the_node() {
    let fake = FakeMcp::start(Knobs {
        huge_bytes: 300_000,
        ..Knobs::default()
    });
    let wf = agent(
        json!([{"server": "kb", "names": ["huge"]}]),
        json!({"maxToolRounds": 1}),
    );
    let script = json!([
        asks(json!([{"name": "huge"}])),
        asks(json!([{"name": "huge"}])),
        answers("never")
    ]);
    let o = run_with(&fake, &wf, script, json!([]), vec![]);
    let RunEnd::Failed(e) = &o.end else {
        panic!("{:?}", o.end)
    };
    assert_eq!(e.code, "loop_limit_exceeded", "{e:?}");
    assert_eq!(calls_at(&fake), ["huge"], "the second round is not run");
    let cap = &of_type(&o.events, EventType::CapBreached)[0].payload;
    assert_eq!(cap["limit"], 1);
    let returned = &of_type(&o.events, EventType::AgentToolReturned)[0].payload;
    assert_eq!(returned["resultBytes"], 300_000);
    let kept = returned["outcome"].as_str().unwrap();
    assert!(kept.len() <= 4096 + 256, "{}", kept.len());
    let content = &last_results(&o)[0].content;
    assert!(
        content.len() < 5000,
        "the model read {} bytes",
        content.len()
    );
}

#[test]
fn a_server_the_run_cannot_use_fails_the_node_before_any_model_call() {
    let fake = FakeMcp::start(Knobs::default());
    let wf = agent(json!([{"server": "elsewhere"}]), json!({}));
    let o = run_with(&fake, &wf, json!([answers("x")]), json!([]), vec![]);
    let RunEnd::Failed(e) = &o.end else {
        panic!("{:?}", o.end)
    };
    assert_eq!(e.code, "tool_server_unavailable");
    assert!(e.message.contains("`ns/elsewhere`"), "{}", e.message);
    assert!(o.calls.is_empty());
    // A tool the config names that the server does not list.
    let wf = agent(json!([{"server": "kb", "names": ["nope"]}]), json!({}));
    let o = run_with(&fake, &wf, json!([answers("x")]), json!([]), vec![]);
    let RunEnd::Failed(e) = &o.end else {
        panic!("{:?}", o.end)
    };
    assert_eq!(e.code, "tool_not_found");
}

/// `core.mcp.toolCall`: one call without a model, by the same rules — a read runs at once
/// and completes with its result; a write waits for approval, then runs once; a tool error
/// fails the node with the record's error.
#[test]
fn a_tool_call_node_calls_one_tool_by_the_same_rules() {
    let fake = FakeMcp::start(Knobs::default());
    let node = |tool: &str, args: Value| {
        json!({"id": "w", "nodes": [{"id": "call", "typeId": "core.mcp.toolCall",
               "config": {"server": "kb", "tool": tool, "arguments": args}}],
               "edges": [], "settings": {"timeout": 0}})
    };
    let read = run_with(
        &fake,
        &node("lookup", json!({"query": "q"})),
        json!([]),
        json!([]),
        vec![],
    );
    assert_eq!(read.end, RunEnd::Completed, "{:?}", read.events);
    let out = &of_type(&read.events, EventType::NodeCompleted)[0].payload["outputs"];
    assert_eq!(out["result"], "found: q");
    assert_eq!(out["toolId"], "mcp:kb/lookup");
    assert!(read.calls.is_empty(), "no model");

    let wf = node("write_note", json!({"text": "hi"}));
    let first = run_with(&fake, &wf, json!([]), json!([]), vec![]);
    let RunEnd::Suspended(waiting) = &first.end else {
        panic!("{:?}", first.end)
    };
    assert_eq!(calls_at(&fake), ["lookup"]);
    let accept = json!([{"interruptId": waiting[0].interrupt_id, "action": "accept"}]);
    let done = run_with(&fake, &wf, json!([]), accept.clone(), first.events.clone());
    assert_eq!(done.end, RunEnd::Completed);
    assert_eq!(calls_at(&fake), ["lookup", "write_note"]);
    let again = run_with(&fake, &wf, json!([]), accept, done.events.clone());
    assert_eq!(ids(&again.events), ids(&done.events));
    assert_eq!(calls_at(&fake).len(), 2, "a replay makes no call");

    let mut unapproved = node("fail", json!({}));
    unapproved["nodes"][0]["config"]["requireApproval"] = json!(false);
    let failed = run_with(&fake, &unapproved, json!([]), json!([]), vec![]);
    let RunEnd::Failed(e) = &failed.end else {
        panic!("{:?}", failed.end)
    };
    assert_eq!(e.code, "tool_error", "{e:?}");
}
