//! The operator's signing key: one Secret (chart `<fullname>-webhook-signing-key`, key
//! `signing-key`, optionally `previous-signing-key` while rotating) from which the webhook
//! subscription secrets and the interrupt-token key are derived, each under its own label
//! (`protocol::webhook::derive_secret`, `protocol::run::token::TokenKey::derive`).
//!
//! Read at each use, so a rotated Secret reaches the operator without a restart.

use std::path::Path;

/// Shortest signing key accepted (bytes): the keys derived from it are HMAC-SHA256 keys.
pub const MIN_SIGNING_KEY_BYTES: usize = 32;

/// Why a signing key cannot be used (`field` is the config field naming the file).
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{field} is empty: set it to the mounted signing key")]
    Unset { field: &'static str },
    #[error("cannot read {field} {path}: {source}")]
    Read {
        field: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{field} {path} holds {len} bytes; at least {MIN_SIGNING_KEY_BYTES} are needed (e.g. `head -c 48 /dev/urandom | base64`)"
    )]
    Short {
        field: &'static str,
        path: String,
        len: usize,
    },
}

/// The key in the file `path` (surrounding whitespace trimmed), named `field` in errors.
pub fn read(field: &'static str, path: &str) -> Result<Vec<u8>, KeyError> {
    if path.is_empty() {
        return Err(KeyError::Unset { field });
    }
    let raw = std::fs::read(Path::new(path)).map_err(|source| KeyError::Read {
        field,
        path: path.to_owned(),
        source,
    })?;
    let key = raw.trim_ascii().to_vec();
    if key.len() < MIN_SIGNING_KEY_BYTES {
        return Err(KeyError::Short {
            field,
            path: path.to_owned(),
            len: key.len(),
        });
    }
    Ok(key)
}
