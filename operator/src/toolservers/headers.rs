//! A ToolServer's request headers from Secrets (`spec.headersFrom[].secretKeyRef`): read for
//! the operator's own listing of its tools and, at run start, to copy into the run's header
//! Secret. Each Secret named is read with one GET in the ToolServer's own namespace; Secrets
//! are never listed or watched (the operator's RBAC on them is `get` only).
//!
//! The values are credentials: [`ResolvedHeaders`] and [`HeaderValueBytes`] print only the
//! header names, and a [`HeaderError`] names the header, Secret and key, never a value.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};
use openwop_crds::ToolServer;
use openwop_crds::toolserver::REASON_HEADER_SECRET_MISSING;
use reqwest::header::{HeaderName, HeaderValue};

/// One header's value, as read from its Secret key (surrounding whitespace trimmed: a value
/// written with `kubectl create secret --from-file` usually ends in a newline, which HTTP
/// does not allow in a header). `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct HeaderValueBytes(Vec<u8>);

impl HeaderValueBytes {
    /// The value, to send or to copy into another Secret. Never log it.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for HeaderValueBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

/// A ToolServer's headers, in `spec.headersFrom` order: each name with its value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ResolvedHeaders {
    headers: Vec<(String, HeaderValueBytes)>,
}

impl ResolvedHeaders {
    /// `(header name, value bytes)` pairs, in `spec.headersFrom` order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.headers.iter().map(|(n, v)| (n.as_str(), v.expose()))
    }

    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }

    pub fn len(&self) -> usize {
        self.headers.len()
    }

    /// The headers as the MCP client sends them, each value marked sensitive (HTTP/2 does not
    /// index it, and `http`'s `Debug` hides it).
    pub fn to_http(&self) -> Vec<(HeaderName, HeaderValue)> {
        self.headers
            .iter()
            .map(|(name, value)| {
                // Both were checked when resolved.
                let name = HeaderName::from_bytes(name.as_bytes())
                    .expect("a header name checked by resolve");
                let mut value = HeaderValue::from_bytes(value.expose())
                    .expect("a header value checked by resolve");
                value.set_sensitive(true);
                (name, value)
            })
            .collect()
    }
}

impl fmt::Debug for ResolvedHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("ResolvedHeaders")
            .field("names", &names)
            .finish_non_exhaustive()
    }
}

/// Why a ToolServer's headers cannot be resolved. Messages name the header, the Secret and
/// the key, and say what to do; never a value.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error(
        "header {header}: Secret {namespace}/{secret} does not exist; create it, or fix spec.headersFrom[].secretKeyRef.name"
    )]
    SecretMissing {
        header: String,
        namespace: String,
        secret: String,
    },
    #[error(
        "header {header}: Secret {namespace}/{secret} has no key {key:?}; add the key, or fix spec.headersFrom[].secretKeyRef.key"
    )]
    KeyMissing {
        header: String,
        namespace: String,
        secret: String,
        key: String,
    },
    #[error(
        "header {header}: key {key:?} of Secret {namespace}/{secret} is empty or not a valid HTTP header value (a line break or control character inside it); store the bare value"
    )]
    InvalidValue {
        header: String,
        namespace: String,
        secret: String,
        key: String,
    },
    #[error(
        "header {header}: the operator may not read Secret {namespace}/{secret} (HTTP 403); grant its ClusterRole `get` on secrets (the chart does)"
    )]
    Forbidden {
        header: String,
        namespace: String,
        secret: String,
    },
    #[error("header {header}: {name:?} is not an HTTP header name; fix spec.headersFrom[].name")]
    InvalidName { header: String, name: String },
    /// The API server failed the GET (not a missing Secret): worth retrying as it is.
    #[error("reading Secret {namespace}/{secret} for header {header}: {source}")]
    Api {
        header: String,
        namespace: String,
        secret: String,
        #[source]
        source: kube::Error,
    },
}

impl HeaderError {
    /// The ToolServer's `Ready` reason for this failure, or `None` for an API server failure
    /// (retried; the status is left as it was).
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            HeaderError::Api { .. } => None,
            _ => Some(REASON_HEADER_SECRET_MISSING),
        }
    }
}

/// Reads each of `ts`'s `spec.headersFrom` Secrets in its namespace (one GET per Secret,
/// however many headers it feeds) and returns the headers with their values.
pub async fn resolve(client: &Client, ts: &ToolServer) -> Result<ResolvedHeaders, HeaderError> {
    if ts.spec.headers_from.is_empty() {
        return Ok(ResolvedHeaders::default());
    }
    let namespace = ts.namespace().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    // The Secrets read so far, by name: `None` when absent.
    let mut read: BTreeMap<&str, Option<Secret>> = BTreeMap::new();
    let mut headers = Vec::with_capacity(ts.spec.headers_from.len());
    for h in &ts.spec.headers_from {
        let header = h.name.clone();
        let secret_name = h.secret_key_ref.name.as_str();
        if HeaderName::from_bytes(h.name.as_bytes()).is_err() {
            return Err(HeaderError::InvalidName {
                header,
                name: h.name.clone(),
            });
        }
        if !read.contains_key(secret_name) {
            let got = match api.get_opt(secret_name).await {
                Ok(s) => s,
                Err(kube::Error::Api(s)) if s.code == 403 => {
                    return Err(HeaderError::Forbidden {
                        header,
                        namespace,
                        secret: secret_name.to_owned(),
                    });
                }
                Err(source) => {
                    return Err(HeaderError::Api {
                        header,
                        namespace,
                        secret: secret_name.to_owned(),
                        source,
                    });
                }
            };
            read.insert(secret_name, got);
        }
        let Some(secret) = read.get(secret_name).and_then(Option::as_ref) else {
            return Err(HeaderError::SecretMissing {
                header,
                namespace,
                secret: secret_name.to_owned(),
            });
        };
        let key = &h.secret_key_ref.key;
        let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(key)) else {
            return Err(HeaderError::KeyMissing {
                header,
                namespace,
                secret: secret_name.to_owned(),
                key: key.clone(),
            });
        };
        let value = bytes.0.trim_ascii();
        if value.is_empty() || HeaderValue::from_bytes(value).is_err() {
            return Err(HeaderError::InvalidValue {
                header,
                namespace,
                secret: secret_name.to_owned(),
                key: key.clone(),
            });
        }
        headers.push((h.name.clone(), HeaderValueBytes(value.to_vec())));
    }
    Ok(ResolvedHeaders { headers })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_names_never_values() {
        let h = ResolvedHeaders {
            headers: vec![(
                "Authorization".into(),
                HeaderValueBytes(b"Bearer s3cr3t-value".to_vec()),
            )],
        };
        let shown = format!("{h:?} {:?}", h.headers[0].1);
        assert!(shown.contains("Authorization"), "{shown}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        let http = h.to_http();
        assert!(http[0].1.is_sensitive());
        assert!(!format!("{http:?}").contains("s3cr3t"));
        assert_eq!(
            h.pairs().collect::<Vec<_>>(),
            vec![("Authorization", &b"Bearer s3cr3t-value"[..])]
        );
    }
}
