//! `kubectl-openwop events` against a real nats-server with JetStream (the binary from
//! `e2e/cluster/build-binaries.sh`, or OPENWOP_NATS_SERVER / PATH).

use std::io::Read as _;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};
use openwop_nats::testing::NatsServer;
use serde_json::{Value, json};

fn start_nats() -> NatsServer {
    NatsServer::start()
}

async fn js(url: &str) -> jetstream::Context {
    js_with(async_nats::connect(url).await.unwrap()).await
}

async fn js_with(client: async_nats::Client) -> jetstream::Context {
    let js = jetstream::new(client);
    js.get_or_create_stream(stream::Config {
        name: "OPENWOP_EVENTS".into(),
        subjects: vec!["openwop.events.>".into(), "openwop.reasoning.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    js
}

fn doc(run: &str, seq: u64, ty: &str, node: Option<&str>, payload: Value) -> Value {
    let mut d = json!({"eventId": format!("evt-{run}-{seq}"), "runId": run, "type": ty,
        "sequence": seq, "timestamp": format!("2026-05-18T10:00:0{seq}.000Z"), "payload": payload});
    if let Some(n) = node {
        d["nodeId"] = json!(n);
    }
    d
}

async fn publish(js: &jetstream::Context, subject: &str, body: &Value) {
    js.publish(subject.to_owned(), serde_json::to_vec(body).unwrap().into())
        .await
        .unwrap()
        .await
        .unwrap();
}

async fn seed(js: &jetstream::Context) {
    let s = "openwop.events.team-a.r1";
    publish(js, s, &doc("r1", 0, "run.started", None, json!({}))).await;
    publish(
        js,
        s,
        &doc(
            "r1",
            1,
            "node.started",
            Some("classify"),
            json!({"nodeId": "classify"}),
        ),
    )
    .await;
    publish(
        js,
        "openwop.reasoning.team-a.r1",
        &json!({"id": "rsn-1", "kind": "reasoning.start",
        "from": "agent-1", "nodeId": "classify", "ts": "2026-05-18T10:00:01.500Z",
        "payload": {"message": "weighing the ticket"}}),
    )
    .await;
    // Another run in the same stream must never show up.
    publish(
        js,
        "openwop.events.team-a.r2",
        &doc("r2", 0, "run.started", None, json!({})),
    )
    .await;
    publish(js, s, &doc("r1", 2, "clarification.requested", Some("classify"),
        json!({"nodeId": "classify", "questions": [{"id": "region", "question": "Which region?"}]}))).await;
}

/// `kubectl-openwop ARGS`; for `events RUN` without `--run-id`, the run name is passed as its
/// runId too (these tests publish on `openwop.events.<ns>.<name>` and have no API server).
fn cli(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kubectl-openwop"));
    c.args(args);
    if args.first() == Some(&"events") && !args.contains(&"--run-id") && args.len() > 1 {
        c.args(["--run-id", args[1]]);
    }
    c.env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("OPENWOP_NATS_URL")
        .env_remove("OPENWOP_NATS_CREDS")
        .env_remove("OPENWOP_NATS_TOKEN_FILE")
        .env_remove("OPENWOP_NATS_USER")
        .env_remove("OPENWOP_NATS_PASSWORD")
        .env("NO_COLOR", "1");
    c
}

fn run_cli(args: &[&str]) -> Output {
    cli(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[tokio::test]
async fn timeline_json_since_seq_and_follow() {
    let nats = start_nats();
    let js = js(&nats.url()).await;
    seed(&js).await;
    let url = &nats.url();

    // Timeline: the run's events in order, the reasoning in its lane, nothing of r2.
    let o = run_cli(&["events", "r1", "-n", "team-a", "--nats-url", url]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].starts_with("10:00:00.000 #   0 run.started"),
        "{text}"
    );
    assert!(
        lines[1].contains("#   1 node.started") && lines[1].contains("classify"),
        "{text}"
    );
    assert!(
        lines[2].contains("┌ reasoning agent-1 classify weighing the ticket"),
        "{text}"
    );
    assert!(
        lines[3].contains("clarification.requested") && lines[3].contains("region: Which region?"),
        "{text}"
    );
    assert!(
        !text.contains("\x1b["),
        "no colour when stdout is not a terminal"
    );
    assert!(!text.contains("r2"), "{text}");

    // --json: one object per line, in stream order, lanes marked.
    let o = run_cli(&["events", "r1", "-n", "team-a", "--nats-url", url, "--json"]);
    assert!(o.status.success());
    let docs: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let lanes: Vec<&str> = docs.iter().map(|d| d["lane"].as_str().unwrap()).collect();
    assert_eq!(lanes, ["events", "events", "reasoning", "events"]);
    let seqs: Vec<u64> = docs
        .iter()
        .filter(|d| d["lane"] == "events")
        .map(|d| d["message"]["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [0, 1, 2]);
    let stream_seqs: Vec<u64> = docs
        .iter()
        .map(|d| d["streamSequence"].as_u64().unwrap())
        .collect();
    assert!(
        stream_seqs.windows(2).all(|w| w[0] < w[1]),
        "{stream_seqs:?}"
    );
    assert_eq!(docs[2]["subject"], "openwop.reasoning.team-a.r1");

    // --since-seq drops earlier run events; --no-reasoning hides the lane.
    let o = run_cli(&[
        "events",
        "r1",
        "-n",
        "team-a",
        "--nats-url",
        url,
        "--json",
        "--since-seq",
        "2",
        "--no-reasoning",
    ]);
    let docs: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(docs.len(), 1, "{docs:?}");
    assert_eq!(docs[0]["message"]["sequence"], 2);

    // -f: prints what is there, then picks up events published later and ends with the run.
    let mut child = cli(&["events", "r1", "-n", "team-a", "-f", "--json"])
        .env("OPENWOP_NATS_URL", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "-f must keep waiting while the run is not over"
    );
    let s = "openwop.events.team-a.r1";
    publish(
        &js,
        s,
        &doc(
            "r1",
            3,
            "node.completed",
            Some("classify"),
            json!({"nodeId": "classify"}),
        ),
    )
    .await;
    publish(&js, s, &doc("r1", 4, "run.completed", None, json!({}))).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("-f did not end after run.completed");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(status.success());
    let seqs: Vec<u64> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|d| d["lane"] == "events")
        .map(|d| d["message"]["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn empty_run_and_unreachable_nats_are_explained() {
    let nats = start_nats();
    let _js = js(&nats.url()).await;
    let o = run_cli(&[
        "events",
        "nothing",
        "-n",
        "team-a",
        "--nats-url",
        &nats.url(),
    ]);
    assert!(o.status.success());
    assert!(stdout(&o).is_empty());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no events yet for run team-a/nothing"));

    let o = run_cli(&[
        "events",
        "r1",
        "--nats-url",
        &nats.url(),
        "--stream",
        "MISSING",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("JetStream stream MISSING not found"));

    drop(nats);
    let port = openwop_nats::testing::free_port();
    let o = run_cli(&[
        "events",
        "r1",
        "--nats-url",
        &format!("nats://127.0.0.1:{port}"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot connect to NATS"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[tokio::test]
async fn authenticated_nats_needs_and_takes_each_credential_form() {
    const PASSWORD: &str = "pw-Zq81-never-printed";
    const TOKEN: &str = "tok-Vx42-never-printed";
    let leaks = |o: &Output| {
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            !all.contains(PASSWORD) && !all.contains(TOKEN),
            "a secret leaked: {all}"
        );
        all
    };

    // User and password: the password only from OPENWOP_NATS_PASSWORD.
    let nats = NatsServer::start_with(&["--user", "ops", "--pass", PASSWORD]);
    let url = nats.url();
    let client = async_nats::ConnectOptions::new()
        .user_and_password("ops".into(), PASSWORD.into())
        .connect(&url)
        .await
        .unwrap();
    seed(&js_with(client).await).await;
    let events = ["events", "r1", "-n", "team-a", "--nats-url", url.as_str()];

    let o = run_cli(&events);
    let all = leaks(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(all.contains("authorization violation"), "{all}");
    assert!(
        all.contains("needs --nats-creds, --nats-token-file or --nats-user"),
        "{all}"
    );

    let with_user = |password: Option<&str>| {
        let mut c = cli(&[&events[..], &["--nats-user", "ops"]].concat());
        match password {
            Some(p) => c.env("OPENWOP_NATS_PASSWORD", p),
            None => c.env_remove("OPENWOP_NATS_PASSWORD"),
        };
        c.output().unwrap()
    };
    let o = with_user(Some(PASSWORD));
    let all = leaks(&o);
    assert!(o.status.success(), "{all}");
    assert_eq!(stdout(&o).lines().count(), 4, "{all}");

    let o = with_user(None);
    let all = leaks(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(
        all.contains("needs the password in the OPENWOP_NATS_PASSWORD environment variable"),
        "{all}"
    );

    let o = with_user(Some("wrong-password"));
    let all = leaks(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(
        all.contains("with the given username and password"),
        "{all}"
    );
    assert!(all.contains("authorization violation"), "{all}");
    drop(nats);

    // Token, from a file (a trailing newline is fine).
    let nats = NatsServer::start_with(&["--auth", TOKEN]);
    let url = nats.url();
    let client = async_nats::ConnectOptions::new()
        .token(TOKEN.into())
        .connect(&url)
        .await
        .unwrap();
    seed(&js_with(client).await).await;
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("token");
    std::fs::write(&good, format!("{TOKEN}\n")).unwrap();
    let bad = dir.path().join("bad-token");
    std::fs::write(&bad, "tok-wrong").unwrap();
    let events = ["events", "r1", "-n", "team-a", "--nats-url", url.as_str()];
    let o = run_cli(&[&events[..], &["--nats-token-file", good.to_str().unwrap()]].concat());
    let all = leaks(&o);
    assert!(o.status.success(), "{all}");
    assert_eq!(stdout(&o).lines().count(), 4, "{all}");
    let o = run_cli(&[&events[..], &["--nats-token-file", bad.to_str().unwrap()]].concat());
    let all = leaks(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(all.contains("with the given token"), "{all}");

    // Two forms at once is a usage error; a missing file is named.
    let o = run_cli(
        &[
            &events[..],
            &[
                "--nats-token-file",
                good.to_str().unwrap(),
                "--nats-user",
                "ops",
            ],
        ]
        .concat(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", leaks(&o));
    let o = run_cli(&[&events[..], &["--nats-creds", "/nonexistent/user.creds"]].concat());
    let all = leaks(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(
        all.contains("/nonexistent/user.creds: no such file"),
        "{all}"
    );
}

#[test]
fn events_without_a_reachable_run_say_how_to_pass_the_run_id() {
    let o = Command::new(env!("CARGO_BIN_EXE_kubectl-openwop"))
        .args([
            "events",
            "r1",
            "-n",
            "team-a",
            "--nats-url",
            "nats://127.0.0.1:1",
        ])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("to read Run team-a/r1") && err.contains("--run-id UID"),
        "{err}"
    );
}
