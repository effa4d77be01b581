//! The part of the kubelet API that `kubectl logs` uses: the API server proxies
//! `GET /containerLogs/{namespace}/{pod}/{container}` to the node's InternalIP and kubelet
//! port over mutual TLS (client certificates signed by the cluster CA).

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio_util::sync::CancellationToken;

use super::ctx::Ctx;

type Body = BoxBody<Bytes, std::io::Error>;

fn tls_config(ctx: &Ctx) -> anyhow::Result<rustls::ServerConfig> {
    let (Some(cert), Some(key)) = (&ctx.opts.tls_cert, &ctx.opts.tls_key) else {
        anyhow::bail!("--tls-cert and --tls-key are required for the kubelet API port");
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("parsing {}", cert.display()))?;
    let key =
        PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading {}", key.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ctx.ca_pem.as_bytes()) {
        roots.add(ca.context("parsing the cluster CA")?)?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .context("building the client-certificate verifier")?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .context("loading the kubelet serving certificate")?;
    Ok(config)
}

pub async fn serve(ctx: Arc<Ctx>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let tls = tokio_rustls::TlsAcceptor::from(Arc::new(tls_config(&ctx)?));
    let addr = format!("127.0.0.1:{}", ctx.opts.kubelet_port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding the kubelet API on {addr}"))?;
    tracing::info!(%addr, "kubelet API (container logs) listening");
    loop {
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(err) => {
                    tracing::warn!(%err, "accept failed");
                    continue;
                }
            },
        };
        let tls = tls.clone();
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let stream = match tls.accept(tcp).await {
                Ok(s) => s,
                Err(err) => {
                    tracing::debug!(%err, %peer, "TLS handshake failed");
                    return;
                }
            };
            let svc = service_fn(move |req| {
                let ctx = ctx.clone();
                let shutdown = shutdown.clone();
                async move { Ok::<_, Infallible>(handle(&ctx, req, shutdown).await) }
            });
            if let Err(err) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!(%err, "kubelet API connection ended");
            }
        });
    }
}

fn text(status: StatusCode, msg: impl Into<String>) -> Response<Body> {
    let body = Full::new(Bytes::from(msg.into()))
        .map_err(|never| match never {})
        .boxed();
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp
}

#[derive(Debug, Default, PartialEq)]
pub struct LogQuery {
    pub follow: bool,
    pub previous: bool,
    pub tail_lines: Option<usize>,
    pub limit_bytes: Option<usize>,
}

pub fn parse_query(q: Option<&str>) -> LogQuery {
    let mut out = LogQuery::default();
    for pair in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, "true"));
        match k {
            "follow" => out.follow = v == "true" || v == "1",
            "previous" => out.previous = v == "true" || v == "1",
            "tailLines" => out.tail_lines = v.parse().ok(),
            "limitBytes" => out.limit_bytes = v.parse().ok(),
            _ => {}
        }
    }
    out
}

/// Log files are `<logs>/<ns>/<pod>/<container>/<restartCount>.log`; returns the current
/// (or previous) one.
pub fn pick_log(dir: &Path, previous: bool) -> Option<(PathBuf, u32)> {
    let mut runs: Vec<u32> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    runs.sort_unstable();
    let n = if previous {
        *runs.iter().rev().nth(1)?
    } else {
        *runs.last()?
    };
    Some((dir.join(format!("{n}.log")), n))
}

pub fn tail(data: &[u8], lines: usize) -> &[u8] {
    let trimmed = data.strip_suffix(b"\n").unwrap_or(data);
    let mut count = 0;
    for (i, b) in trimmed.iter().enumerate().rev() {
        if *b == b'\n' {
            count += 1;
            if count == lines {
                return &data[i + 1..];
            }
        }
    }
    if lines == 0 { &[] } else { data }
}

async fn handle(
    ctx: &Ctx,
    req: Request<hyper::body::Incoming>,
    shutdown: CancellationToken,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    if path == "/healthz" {
        return text(StatusCode::OK, "ok");
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ["containerLogs", ns, pod, container] = parts.as_slice() else {
        return text(
            StatusCode::NOT_FOUND,
            format!("{path}: the openwop node agent serves only /containerLogs and /healthz"),
        );
    };
    if [ns, pod, container]
        .iter()
        .any(|s| s.is_empty() || s.contains("..") || s.contains('\\'))
    {
        return text(StatusCode::BAD_REQUEST, "invalid path");
    }
    let q = parse_query(req.uri().query());
    let dir = ctx.logs_dir().join(ns).join(pod).join(container);
    let Some((file, run)) = pick_log(&dir, q.previous) else {
        let what = if q.previous {
            "previous terminated container"
        } else {
            "container"
        };
        return text(
            StatusCode::NOT_FOUND,
            format!("{what} {container:?} in pod {ns}/{pod} has no logs on this node"),
        );
    };
    let data = match tokio::fs::read(&file).await {
        Ok(d) => d,
        Err(err) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading logs: {err}"),
            );
        }
    };
    let mut start: Vec<u8> = match q.tail_lines {
        Some(n) => tail(&data, n).to_vec(),
        None => data.clone(),
    };
    if let Some(limit) = q.limit_bytes {
        start.truncate(limit);
    }
    if !q.follow || q.previous {
        return text(StatusCode::OK, String::from_utf8_lossy(&start).into_owned());
    }
    // Follow: stream what is appended until the process exits (its .exit marker appears).
    let exit_marker = dir.join(format!("{run}.exit"));
    let offset = data.len() as u64;
    let (tx, rx) = futures::channel::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(16);
    tokio::spawn(follow(
        file,
        offset,
        exit_marker,
        Bytes::from(start),
        tx,
        shutdown,
    ));
    let body = StreamBody::new(rx).boxed();
    Response::new(body)
}

async fn follow(
    file: PathBuf,
    mut offset: u64,
    exit_marker: PathBuf,
    first: Bytes,
    mut tx: futures::channel::mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>,
    shutdown: CancellationToken,
) {
    use futures::SinkExt;
    if !first.is_empty() && tx.send(Ok(Frame::data(first))).await.is_err() {
        return;
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let exited = exit_marker.exists();
        if let Ok(mut f) = tokio::fs::File::open(&file).await
            && f.seek(std::io::SeekFrom::Start(offset)).await.is_ok()
        {
            loop {
                match f.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        offset += n as u64;
                        let chunk = Bytes::copy_from_slice(&buf[..n]);
                        if tx.send(Ok(Frame::data(chunk))).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
        if exited || shutdown.is_cancelled() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query() {
        let q = parse_query(Some("follow=true&tailLines=3&previous=false"));
        assert_eq!(
            q,
            LogQuery {
                follow: true,
                previous: false,
                tail_lines: Some(3),
                limit_bytes: None
            }
        );
    }

    #[test]
    fn tails() {
        assert_eq!(tail(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(tail(b"a\nb\nc", 1), b"c");
        assert_eq!(tail(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(tail(b"a\n", 0), b"");
    }

    #[test]
    fn picks_current_and_previous() {
        let d = tempfile::tempdir().unwrap();
        for n in [0, 1, 2, 10] {
            std::fs::write(d.path().join(format!("{n}.log")), "x").unwrap();
        }
        assert_eq!(pick_log(d.path(), false).unwrap().1, 10);
        assert_eq!(pick_log(d.path(), true).unwrap().1, 2);
    }
}
