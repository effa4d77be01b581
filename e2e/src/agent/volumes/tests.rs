use super::*;

fn files(pairs: &[(&str, &str)]) -> Files {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), (v.as_bytes().to_vec(), 0o644)))
        .collect()
}

#[test]
fn atomic_writer_swaps_content_and_drops_stale_keys() {
    let d = tempfile::tempdir().unwrap();
    write_atomic(d.path(), &files(&[("a", "1"), ("sub/b", "2")])).unwrap();
    assert_eq!(std::fs::read_to_string(d.path().join("a")).unwrap(), "1");
    assert_eq!(
        std::fs::read_to_string(d.path().join("sub/b")).unwrap(),
        "2"
    );
    write_atomic(d.path(), &files(&[("a", "3")])).unwrap();
    assert_eq!(std::fs::read_to_string(d.path().join("a")).unwrap(), "3");
    assert!(std::fs::symlink_metadata(d.path().join("sub")).is_err());
    let versions = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("..") && n != "..data"
        })
        .count();
    assert_eq!(versions, 1, "old versions are removed");
}

#[test]
fn paths_must_stay_inside_the_volume() {
    assert!(check_rel("v", "a/b").is_ok());
    for bad in ["", "/etc/passwd", "../x", "a/../../x", "..data", "./a"] {
        let err = check_rel("v", bad).unwrap_err().to_string();
        assert!(err.contains("volume \"v\""), "{err}");
    }
}

#[test]
fn items_select_keys_and_modes() {
    let data: BTreeMap<String, Vec<u8>> = [("k".to_string(), b"v".to_vec())].into();
    let src = Source::new("vol", "Secret", "ns", "s");
    let items = [KeyToPath {
        key: "k".into(),
        path: "dir/file".into(),
        mode: Some(0o400),
    }];
    let mut f = Files::new();
    project_keys(&src, &data, Some(&items), false, 0o644, &mut f).unwrap();
    assert_eq!(f.get("dir/file"), Some(&(b"v".to_vec(), 0o400)));
    let missing = [KeyToPath {
        key: "nope".into(),
        path: "x".into(),
        mode: None,
    }];
    let err = project_keys(&src, &data, Some(&missing), false, 0o644, &mut f)
        .unwrap_err()
        .to_string();
    assert_eq!(err, "volume \"vol\": key \"nope\" not found in Secret ns/s");
    project_keys(&src, &data, Some(&missing), true, 0o644, &mut f).unwrap();
}

#[test]
fn mountpoints_nest_inside_earlier_mounts() {
    let d = tempfile::tempdir().unwrap();
    let outer_src = d.path().join("outer-src");
    let inner_src = d.path().join("inner-src");
    std::fs::create_dir_all(&outer_src).unwrap();
    std::fs::create_dir_all(&inner_src).unwrap();
    let file_src = d.path().join("msg");
    std::fs::write(&file_src, "").unwrap();
    let mounts = vec![
        Mount {
            source: outer_src.clone(),
            target: d.path().join("t/outer"),
            read_only: false,
        },
        Mount {
            source: inner_src,
            target: d.path().join("t/outer/inner"),
            read_only: true,
        },
        Mount {
            source: file_src,
            target: d.path().join("t/file"),
            read_only: false,
        },
    ];
    ensure_mountpoints(&mounts).unwrap();
    assert!(d.path().join("t/outer").is_dir());
    assert!(
        outer_src.join("inner").is_dir(),
        "created inside the outer volume"
    );
    assert!(!d.path().join("t/outer/inner").exists());
    assert!(d.path().join("t/file").is_file());
}

/// A fake apiserver for the token request: answers each TokenRequest with the next status
/// code in `answers` (403 bodies in the node authorizer's words), counting the requests.
fn token_server(
    answers: Vec<(u16, &'static str)>,
) -> (Client, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use kube::client::Body;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (svc, mut handle) = tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        let mut answers = answers.into_iter();
        while let Some((req, send)) = handle.next_request().await {
            assert!(req.uri().path().ends_with("/serviceaccounts/default/token"));
            count.fetch_add(1, Ordering::SeqCst);
            let (code, message) = answers.next().unwrap_or((201, ""));
            let body = if code == 201 {
                serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"audiences": []}, "status": {"token": "t0ken", "expirationTimestamp": "2026-12-07T23:00:00Z"}})
            } else {
                serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                    "message": message, "reason": "Forbidden", "code": code})
            };
            send.send_response(
                http::Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            );
        }
    });
    (Client::new(svc, "default"), seen)
}

fn bound_pod() -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "spec": {"containers": [{"name": "c"}]},
    }))
    .unwrap()
}

const NOT_YET: &str = "serviceaccounts \"default\" is forbidden: User \"system:node:n\" cannot create resource \"serviceaccounts/token\" in API group \"\" in the namespace \"ns\": no relationship found between node 'n' and this object";

#[tokio::test]
async fn a_token_refused_while_the_node_graph_lags_the_binding_is_retried() {
    let (client, seen) = token_server(vec![(403, NOT_YET), (403, NOT_YET)]);
    let token = bound_token(&client, &bound_pod(), vec![], 3600).await;
    assert_eq!(token.as_deref(), Ok("t0ken"));
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[tokio::test]
async fn any_other_refusal_is_reported_at_once() {
    let (client, seen) = token_server(vec![(
        403,
        "serviceaccounts \"default\" is forbidden: nope",
    )]);
    let err = bound_token(&client, &bound_pod(), vec![], 3600)
        .await
        .unwrap_err();
    assert!(err.contains("nope"), "{err}");
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_that_outlasts_the_lag_is_reported() {
    let (client, _) = token_server(vec![(403, NOT_YET); 100]);
    let err = bound_token(&client, &bound_pod(), vec![], 3600)
        .await
        .unwrap_err();
    assert!(err.contains("no relationship found"), "{err}");
}
