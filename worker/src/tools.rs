//! The ToolServers a run's LLM nodes may call (the snapshot's `toolServers`, resolved by the
//! operator), and one MCP session per server for the worker's life, opened when a node first
//! needs it. Header values are read from the files the operator mounted; they are sent
//! marked sensitive and registered for redaction, never logged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openwop_protocol::run::snapshot::ToolServerMount;
use openwop_protocol::tools::mcp::MAX_RESPONSE_BYTES;
use openwop_providers::mcp::{McpError, McpServer, McpSession};
use reqwest::header::{HeaderName, HeaderValue};

/// Why a server cannot be used. Messages name the server, header and file, never a value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolServerError {
    #[error(
        "tool server `{0}` is not available to this run: declare a ToolServer of that name that admits the Workflow's namespace, then start a new run"
    )]
    Unknown(String),
    #[error(
        "tool server `{server}`: header `{header}` cannot be read from {path} ({why}); check the ToolServer's headersFrom Secret"
    )]
    Header {
        server: String,
        header: String,
        path: String,
        why: String,
    },
    #[error("tool server `{server}`: {source}")]
    Mcp {
        server: String,
        #[source]
        source: McpError,
    },
}

impl ToolServerError {
    /// Whether the same call may succeed later (a timeout, a 5xx, no connection).
    pub fn is_transient(&self) -> bool {
        matches!(self, ToolServerError::Mcp { source, .. } if source.is_transient())
    }
}

struct Server {
    mount: ToolServerMount,
    /// The server as the client reaches it, or why its headers cannot be read.
    reach: Result<McpServer, ToolServerError>,
    session: tokio::sync::Mutex<Option<Arc<McpSession>>>,
}

/// The run's ToolServers by namespace and name.
#[derive(Default)]
pub struct ToolServers {
    servers: BTreeMap<(String, String), Server>,
}

impl std::fmt::Debug for ToolServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.servers.keys().map(|(ns, n)| format!("{ns}/{n}")))
            .finish()
    }
}

impl ToolServers {
    /// The servers of `mounts`, and their header values as `(secretId, value)` pairs to
    /// redact (id `toolserver:<name>:<header>`).
    pub fn from_mounts(mounts: &[ToolServerMount]) -> (ToolServers, Vec<(String, String)>) {
        let mut secrets = Vec::new();
        let servers = mounts
            .iter()
            .map(|m| {
                let reach = reach(m, &mut secrets);
                let server = Server {
                    mount: m.clone(),
                    reach,
                    session: tokio::sync::Mutex::new(None),
                };
                ((m.namespace.clone(), m.name.clone()), server)
            })
            .collect();
        (ToolServers { servers }, secrets)
    }

    fn get(&self, namespace: &str, name: &str) -> Option<&Server> {
        self.servers.get(&(namespace.to_owned(), name.to_owned()))
    }

    /// How the operator declared ToolServer `namespace/name`, if the run may use it.
    pub fn mount(&self, namespace: &str, name: &str) -> Option<&ToolServerMount> {
        self.get(namespace, name).map(|s| &s.mount)
    }

    /// The session with ToolServer `namespace/name`, connecting on first use (a failed
    /// connect is tried again by the next caller).
    pub async fn session(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<McpSession>, ToolServerError> {
        let server = self
            .get(namespace, name)
            .ok_or_else(|| ToolServerError::Unknown(format!("{namespace}/{name}")))?;
        let reach = server.reach.as_ref().map_err(Clone::clone)?;
        let mut slot = server.session.lock().await;
        if let Some(s) = slot.as_ref() {
            return Ok(s.clone());
        }
        let session =
            McpSession::connect(reach.clone())
                .await
                .map_err(|source| ToolServerError::Mcp {
                    server: name.to_owned(),
                    source,
                })?;
        let session = Arc::new(session);
        *slot = Some(session.clone());
        Ok(session)
    }
}

fn reach(
    m: &ToolServerMount,
    secrets: &mut Vec<(String, String)>,
) -> Result<McpServer, ToolServerError> {
    let mut headers = Vec::new();
    for h in &m.headers {
        let fail = |why: String| ToolServerError::Header {
            server: m.name.clone(),
            header: h.name.clone(),
            path: h.path.clone(),
            why,
        };
        let raw = std::fs::read_to_string(&h.path).map_err(|e| fail(e.kind().to_string()))?;
        // As with every mounted secret, trailing whitespace (a newline) is not the value.
        let value = raw.trim_end().to_owned();
        if value.is_empty() {
            return Err(fail("the file is empty".into()));
        }
        secrets.push((format!("toolserver:{}:{}", m.name, h.name), value.clone()));
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| fail("not a valid header name".into()))?;
        let mut value = HeaderValue::from_str(&value)
            .map_err(|_| fail("the value has characters a header cannot carry".into()))?;
        value.set_sensitive(true);
        headers.push((name, value));
    }
    Ok(McpServer {
        url: m.url.clone(),
        headers,
        revisions: m.protocol_version,
        timeout: Duration::from_secs(u64::from(m.timeout_seconds)),
        max_body_bytes: MAX_RESPONSE_BYTES,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use openwop_protocol::run::snapshot::SecretMount;

    fn mount(headers: Vec<SecretMount>) -> ToolServerMount {
        ToolServerMount {
            name: "tickets".into(),
            namespace: "ns".into(),
            url: "http://127.0.0.1:9/mcp".into(),
            headers,
            timeout_seconds: 5,
            max_result_bytes: 4096,
            protocol_version: Default::default(),
            tool_tiers: vec![],
        }
    }

    /// Header values are read from their files (without the trailing newline), registered
    /// for redaction and never shown by Debug or an error; an unreadable file makes the
    /// server unusable with an error naming the header and the file.
    #[tokio::test]
    async fn headers_come_from_files_and_never_show() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("authorization");
        std::fs::write(&path, "Bearer tok-123\n").unwrap();
        let (servers, secrets) = ToolServers::from_mounts(&[mount(vec![SecretMount {
            name: "Authorization".into(),
            path: path.display().to_string(),
        }])]);
        assert_eq!(
            secrets,
            [(
                "toolserver:tickets:Authorization".to_owned(),
                "Bearer tok-123".to_owned()
            )]
        );
        let reach = servers
            .get("ns", "tickets")
            .unwrap()
            .reach
            .as_ref()
            .unwrap();
        assert_eq!(reach.headers[0].1, "Bearer tok-123");
        assert!(reach.headers[0].1.is_sensitive());
        assert!(!format!("{servers:?} {reach:?}").contains("tok-123"));

        let (servers, secrets) = ToolServers::from_mounts(&[mount(vec![SecretMount {
            name: "Authorization".into(),
            path: dir.path().join("missing").display().to_string(),
        }])]);
        assert!(secrets.is_empty());
        let err = servers.session("ns", "tickets").await.unwrap_err();
        assert!(
            matches!(&err, ToolServerError::Header { header, .. } if header == "Authorization"),
            "{err}"
        );
        let err = servers.session("other", "tickets").await.unwrap_err();
        assert_eq!(err, ToolServerError::Unknown("other/tickets".into()));
        assert!(err.to_string().contains("declare a ToolServer"));
    }
}
