//! `kubectl-openwop events` against a real nats-server with JetStream (the binary from
//! `e2e/cluster/build-binaries.sh`, or OPENWOP_NATS_SERVER / PATH).

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};
use serde_json::{Value, json};

fn nats_server_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("OPENWOP_NATS_SERVER") {
        return p.into();
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let bins = home.join(".cache/openwop/bin");
    if let Ok(dirs) = std::fs::read_dir(&bins) {
        for d in dirs.flatten() {
            let p = d.path().join("nats-server");
            if p.is_file() {
                return p;
            }
        }
    }
    if let Some(p) = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
    {
        return p;
    }
    panic!(
        "nats-server not found: run `bash e2e/cluster/build-binaries.sh` or set OPENWOP_NATS_SERVER"
    );
}

struct Nats {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_nats() -> Nats {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(nats_server_bin())
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nats-server");
    let url = format!("nats://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nats-server did not listen on {port}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Nats {
        child,
        url,
        _dir: dir,
    }
}

async fn js(url: &str) -> jetstream::Context {
    let js = jetstream::new(async_nats::connect(url).await.unwrap());
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

fn cli(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kubectl-openwop"));
    c.args(args)
        .env_remove("OPENWOP_NATS_URL")
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
    let nats = start_nats().await;
    let js = js(&nats.url).await;
    seed(&js).await;
    let url = nats.url.as_str();

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
    let nats = start_nats().await;
    let _js = js(&nats.url).await;
    let o = run_cli(&["events", "nothing", "-n", "team-a", "--nats-url", &nats.url]);
    assert!(o.status.success());
    assert!(stdout(&o).is_empty());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no events yet for run team-a/nothing"));

    let o = run_cli(&[
        "events",
        "r1",
        "--nats-url",
        &nats.url,
        "--stream",
        "MISSING",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("JetStream stream MISSING not found"));

    drop(nats);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
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
