//! A webhook receiver for tests: an HTTPS server on 127.0.0.1 (certificate from a throwaway
//! CA made with `openssl`) that records every request and answers from a script (e.g. 500
//! once, then 200). Tests point a subscription at [`Receiver::url`], trust [`Receiver::ca_pem`]
//! and read back [`Receiver::deliveries`].

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// One request as received.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Lower-case header names.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    /// What the receiver answered.
    pub status: u16,
}

impl Delivery {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

#[derive(Default)]
struct State {
    deliveries: Vec<Delivery>,
    /// Statuses to answer next, in order; 200 once empty.
    script: VecDeque<u16>,
}

/// The running receiver (stops when dropped).
pub struct Receiver {
    pub port: u16,
    /// The CA that issued the server certificate (PEM).
    pub ca_pem: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn openssl(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .context("running openssl (needed to make the test receiver's certificate)")?;
    if !out.status.success() {
        bail!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// A CA and a server certificate for 127.0.0.1 signed by it, written in `dir`.
fn make_certificates(dir: &Path) -> anyhow::Result<(String, String, String)> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=openwop-test-ca",
    ]);
    openssl(dir, &ca)?;
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(dir, &csr)?;
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "leaf.crt",
            "-days",
            "2",
            "-extfile",
            "leaf.ext",
        ],
    )?;
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).with_context(|| f.to_owned());
    Ok((read("ca.crt")?, read("leaf.crt")?, read("leaf.key")?))
}

impl Receiver {
    /// Starts a receiver on a free port of 127.0.0.1; certificates are written in `dir`.
    pub async fn start(dir: &Path) -> anyhow::Result<Receiver> {
        let (ca_pem, cert_pem, key_pem) = make_certificates(dir)?;
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<_, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        let tls = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let tls = tls.clone();
                let st = st.clone();
                tokio::spawn(async move {
                    let Ok(stream) = tls.accept(tcp).await else {
                        return;
                    };
                    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let st = st.clone();
                        async move {
                            let headers = req
                                .headers()
                                .iter()
                                .map(|(k, v)| {
                                    (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())
                                })
                                .collect();
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes().to_vec())
                                .unwrap_or_default();
                            let status = {
                                let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
                                let status = s.script.pop_front().unwrap_or(200);
                                s.deliveries.push(Delivery {
                                    headers,
                                    body,
                                    status,
                                });
                                status
                            };
                            let mut resp = Response::new(Full::new(Bytes::new()));
                            *resp.status_mut() =
                                StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(Receiver {
            port,
            ca_pem,
            state,
            task,
        })
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// Answer the next requests with these statuses (then 200 again).
    pub fn answer_next(&self, statuses: &[u16]) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.script.extend(statuses.iter().copied());
    }

    /// Every request so far, in arrival order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .deliveries
            .clone()
    }
}
