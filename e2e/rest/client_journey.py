"""The REST journey, driven by the real PyPI `openwop-client` (e2e/tests/journeys.rs runs it).

Environment: OPENWOP_URL, NS, TOKEN (a ServiceAccount of NS with the team Role), TOKEN_NORBAC
(a ServiceAccount of NS without RBAC), TOKEN_OTHER (a ServiceAccount of another namespace with
the same Role there), CLARIFY_RUN_ID (runId of a Run waiting for a clarification).
Prints one JSON line: the runIds created, for the caller to find with kubectl.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

from openwop_client import OpenwopClient
from openwop_client.errors import WopError
from openwop_client.types import CancelRunRequest, CreateRunRequest, PauseRunRequest, ResolveInterruptRequest

URL = os.environ["OPENWOP_URL"]
NS = os.environ["NS"]
client = OpenwopClient(URL, os.environ["TOKEN"])
created = []


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def expect_error(fn, status, code):
    try:
        fn()
    except WopError as e:
        check(e.status == status, f"expected {status}, got {e.status}: {e.raw_text}")
        check(e.envelope is not None and e.envelope.error == code, f"expected {code}: {e.raw_text}")
        body = json.loads(e.raw_text)
        check(set(body) <= {"error", "message", "details"}, f"extra keys: {body}")
        return body
    raise AssertionError(f"expected HTTP {status} {code}, got success")


def wait_status(run_id, want, secs=120):
    deadline = time.time() + secs
    snap = None
    while time.time() < deadline:
        snap = client.runs_get(run_id)
        if snap.status == want:
            return snap
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not reach {want}: {snap}")


def events_of(run_id, last_event_id=None, stream_mode="debug"):
    # debug: every event (the default `updates` mode leaves node.started and logs out).
    return list(client.runs_events(run_id, stream_mode=stream_mode, last_event_id=last_event_id, timeout_seconds=120))


# Discovery and the OpenAPI document need no token.
caps = client.discovery_capabilities()
check(caps.protocolVersion, "capabilities have a protocolVersion")
doc = client.discovery_openapi()
check("/v1/runs/{runId}/events" in doc["paths"], "openapi lists the events endpoint")

wf = client.workflows_get("hello_world")
check(wf["id"] == "hello_world" and len(wf["nodes"]) == 2, f"workflow: {wf}")

# Create, get, follow over SSE until the server closes the stream after run.completed.
resp = client.runs_create(CreateRunRequest(workflowId="hello_world", inputs={"greeting": "hi"}, tags=["journey"], metadata={"ticket": 7}))
created.append(resp.runId)
check(resp.eventsUrl == f"/v1/runs/{resp.runId}/events", resp.eventsUrl)
evs = events_of(resp.runId)
types = [e.type for e in evs]
check(types[0] == "run.started" and types[-1] == "run.completed", f"events: {types}")
check([e.sequence for e in evs] == list(range(len(evs))), "gapless sequences")
snap = wait_status(resp.runId, "completed", 30)
check(snap.workflowId == "hello_world" and snap.completedAt, f"snapshot: {snap}")
check(snap.tags == ["journey"] and snap.metadata == {"ticket": 7}, f"tags and metadata: {snap}")
# Last-Event-ID resumes after that event.
tail = events_of(resp.runId, last_event_id=str(evs[2].sequence))
check([e.sequence for e in tail] == [e.sequence for e in evs[3:]], "Last-Event-ID resume")
polled = client.runs_poll_events(resp.runId, last_sequence=len(evs) - 2, timeout_seconds=1)
check([e.type for e in polled.events] == ["run.completed"] and polled.isComplete, f"poll: {polled}")
# The default stream mode (updates) leaves node.started out; values sends snapshots.
updates = [e.type for e in events_of(resp.runId, stream_mode=None)]
check("node.started" not in updates and updates[-1] == "run.completed", f"updates: {updates}")

# Idempotent create: same key and body → same run; same key, other body → 409.
key = f"journey-{time.time()}"
a = client.runs_create(CreateRunRequest(workflowId="hello_world", inputs={"greeting": "x"}), idempotency_key=key)
b = client.runs_create(CreateRunRequest(workflowId="hello_world", inputs={"greeting": "x"}), idempotency_key=key)
created.append(a.runId)
check(a.runId == b.runId, "same key and body give the same run")
expect_error(lambda: client.runs_create(CreateRunRequest(workflowId="hello_world", inputs={"greeting": "y"}), idempotency_key=key), 409, "idempotency_key_mismatch")

# Unknown workflow → 400 (rest-endpoints.md); inputs not matching the declared variables → 400 with details.
body = expect_error(lambda: client.runs_create(CreateRunRequest(workflowId="no_such_workflow")), 400, "validation_error")
check(body["details"]["field"] == "workflowId", f"details: {body}")
body = expect_error(lambda: client.runs_create(CreateRunRequest(workflowId="typed", inputs={"count": "two"})), 400, "validation_error")
check(body["details"]["fields"][0]["field"] == "/inputs/count", f"details: {body}")

# Approval through the interrupts endpoint (mock agent at low confidence).
appr = client.runs_create(CreateRunRequest(workflowId="conformance-mock-agent", configurable={"escalationThreshold": 0.7}))
created.append(appr.runId)
snap = wait_status(appr.runId, "waiting-approval")
check(snap.currentNodeId == "agent", f"suspended at the agent: {snap}")
r = client.interrupts_resolve_by_run(appr.runId, "agent", ResolveInterruptRequest(resumeValue={"action": "accept"}))
check(r.runId == appr.runId and r.nodeId == "agent", f"resolve: {r}")
wait_status(appr.runId, "completed")
received = [e for e in events_of(appr.runId) if e.type == "approval.received"]
check(received and received[0].payload["action"] == "accept" and received[0].payload["decidedBy"], f"approval.received with decidedBy: {received}")

# Cancel a waiting run.
c = client.runs_create(CreateRunRequest(workflowId="conformance-mock-agent"))
created.append(c.runId)
wait_status(c.runId, "waiting-approval")
why = "journey: the inputs were wrong"
check(client.runs_cancel(c.runId, CancelRunRequest(reason=why)).status == "cancelling", "cancel accepted")
wait_status(c.runId, "cancelled")
last = events_of(c.runId)[-1]
check(last.type == "run.cancelled", "SSE closes after run.cancelled")
check(last.payload["reason"] == why, f"run.cancelled carries the caller's reason: {last.payload}")

# Pause and resume (`napper`: an 8 s delay, which waits without a pod above the install's 2 s
# threshold, then a noop): paused at once, a second pause refused, resumed, completed.
nap = client.runs_create(CreateRunRequest(workflowId="napper"))
created.append(nap.runId)
wait_status(nap.runId, "running")
p = client.runs_pause(nap.runId, PauseRunRequest(reason="journey", drainPolicy="immediate"))
check(p.runId == nap.runId and p.status == "paused" and p.pausedAt, f"pause: {p}")
wait_status(nap.runId, "paused")
body = expect_error(lambda: client.runs_pause(nap.runId), 409, "run_state_conflict")
check(body["details"]["runStatus"] == "paused", f"second pause: {body}")
r = client.runs_resume(nap.runId)
check(r.runId == nap.runId and r.status == "running" and r.resumedAt, f"resume: {r}")
wait_status(nap.runId, "completed")
types = [e.type for e in events_of(nap.runId)]
check(types.count("run.paused") == 1 and types.count("run.resumed") == 1, f"pause events: {types}")
check(types.index("run.paused") < types.index("run.resumed") and types[-1] == "run.completed", f"pause order: {types}")
expect_error(lambda: client.runs_resume(nap.runId), 409, "run_terminal")

# A clarification (the run was applied with kubectl; scripted provider) answered over REST.
cid = os.environ["CLARIFY_RUN_ID"]
snap = wait_status(cid, "waiting-input")
pending = [e for e in client.runs_poll_events(cid, last_sequence=None, timeout_seconds=1).events if e.type == "clarification.requested"]
check(pending and pending[-1].payload["questions"][0]["id"] == "region", f"question: {pending}")
client.interrupts_resolve_by_run(cid, snap.currentNodeId, ResolveInterruptRequest(resumeValue={"answers": {"region": "eu"}}))
wait_status(cid, "completed")

# An external event (`order`: core.interrupt kind external-event, correlation {orderId:
# order-42, status: settled}) delivered with the signed token the snapshot hands out, by a
# client holding no bearer: a mismatch is 422 and changes nothing, the match completes the
# node with the event; the same event delivered again (same eventId) is answered 200 and
# recorded once, any other event on the used token is 409.
ev = client.runs_create(CreateRunRequest(workflowId="order"))
created.append(ev.runId)
wait_status(ev.runId, "waiting-external")
# The client's RunSnapshot keeps only the spec's members; the token is under `interrupt`.
snap_req = urllib.request.Request(f"{URL}/v1/runs/{ev.runId}", headers={"Authorization": f"Bearer {os.environ['TOKEN']}"})
interrupt = json.loads(urllib.request.urlopen(snap_req, timeout=10).read())["interrupt"]
check(interrupt["kind"] == "external-event" and interrupt["nodeId"] == "wait-for-payment", f"interrupt: {interrupt}")
tok = interrupt["interruptToken"]
check(interrupt["callbackUrl"] == f"/v1/interrupts/{tok}", f"callbackUrl: {interrupt}")
# The client sends the by-token calls without its bearer (the token is the credential).
anon = OpenwopClient(URL, "unused-by-token-calls")
seen = anon.interrupts_inspect_by_token(tok)
check(seen.kind == "external-event" and seen.key == "wait-for-payment/interrupt", f"inspect: {seen}")
check(seen.data["correlation"] == {"orderId": "order-42", "status": "settled"}, f"inspect data: {seen}")
body = expect_error(lambda: anon.interrupts_resolve_by_token(tok, ResolveInterruptRequest(resumeValue={"orderId": "order-41", "status": "settled"})), 422, "correlation_mismatch")
check(body["details"]["keys"] == ["orderId"], f"mismatch details: {body}")
check(client.runs_get(ev.runId).status == "waiting-external", "a mismatch leaves the run waiting")
event = {"orderId": "order-42", "status": "settled", "ref": "tx-9", "eventId": "evt-order-42-1"}
r = anon.interrupts_resolve_by_token(tok, ResolveInterruptRequest(resumeValue=event))
check(r["runId"] == ev.runId and r["nodeId"] == "wait-for-payment", f"resolve by token: {r}")
wait_status(ev.runId, "completed")
again = anon.interrupts_resolve_by_token(tok, ResolveInterruptRequest(resumeValue=event))
check(again["runId"] == ev.runId and again["status"] == "completed", f"redelivery: {again}")
other_event = dict(event, eventId="evt-order-42-2")
expect_error(lambda: anon.interrupts_resolve_by_token(tok, ResolveInterruptRequest(resumeValue=other_event)), 409, "interrupt_already_resolved")
evs = events_of(ev.runId)
done = [e for e in evs if e.type == "node.completed" and e.nodeId == "wait-for-payment"]
check(done and done[0].payload["outputs"]["eventPayload"] == event, f"node.completed: {done}")
resolved = [e for e in evs if e.type == "interrupt.resolved"]
check(len(resolved) == 1 and resolved[0].payload["resolvedBy"] == "callback-token", f"interrupt.resolved: {resolved}")

# Auth: no token → 401; a ServiceAccount without RBAC → 403 on create, 404 on a run;
# another namespace's caller → 404, the same as a run that does not exist.
req = urllib.request.Request(f"{URL}/v1/runs/{resp.runId}")
try:
    urllib.request.urlopen(req, timeout=10)
    raise AssertionError("no token was accepted")
except urllib.error.HTTPError as e:
    check(e.code == 401 and json.loads(e.read())["error"] == "unauthenticated", f"no token: {e.code}")
norbac = OpenwopClient(URL, os.environ["TOKEN_NORBAC"])
expect_error(lambda: norbac.runs_create(CreateRunRequest(workflowId="hello_world")), 403, "forbidden")
expect_error(lambda: norbac.runs_get(resp.runId), 404, "not_found")
other = OpenwopClient(URL, os.environ["TOKEN_OTHER"])
hidden = expect_error(lambda: other.runs_get(resp.runId), 404, "not_found")
absent = expect_error(lambda: other.runs_get("00000000-0000-0000-0000-000000000000"), 404, "not_found")
check(hidden["message"].replace(resp.runId, "X") == absent["message"].replace("00000000-0000-0000-0000-000000000000", "X"), "404s are indistinguishable")
expect_error(lambda: other.runs_cancel(resp.runId), 404, "not_found")
expect_error(lambda: OpenwopClient(URL, "not-a-token").runs_get(resp.runId), 401, "unauthenticated")

print(json.dumps({"created": created}))
