//! Signed interrupt tokens (`interrupt.md` §"Signed resolution tokens", RFC 0093): the
//! credential of `GET`/`POST /v1/interrupts/{token}`, for a caller that holds no bearer token
//! (a payment provider's webhook, a person following a link).
//!
//! `token = base64url(payload) "." base64url(HMAC-SHA256(key, base64url(payload)))`, with
//! `payload = JSON {runId, nodeId, interruptId, expiresAt, intent, kid}`. `kid` names the key
//! that signed it, so a rotated signing key keeps verifying the tokens already handed out
//! ([`TokenKeys`] holds the current key and the previous ones). The MAC is compared in
//! constant time, and nothing of a token is trusted before its MAC verifies.
//!
//! Pure: the caller gives the keys and the time. What a verified token may still do (is its
//! interrupt pending, was it resolved) is the caller's check against the run.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::hmac::{constant_time_eq, hmac_sha256};

/// Default token lifetime (the spec's SHOULD: 30 minutes).
pub const DEFAULT_TOKEN_SECONDS: u64 = 30 * 60;

/// Who answers through a signed token: `interrupt.resolved.resolvedBy` and
/// `approval.received.decidedBy` (the caller is known only by the token it holds).
pub const CALLBACK_TOKEN_PRINCIPAL: &str = "callback-token";

/// Longest token accepted for decoding (a real one is ~300 characters): a longer path
/// segment is refused before any work.
const MAX_TOKEN_CHARS: usize = 2048;

/// What a token authorizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenIntent {
    /// Inspect (`GET`) and resolve (`POST`).
    Resolve,
    /// Inspect only: a resolve is refused with 403.
    Inspect,
}

/// The signed content of a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenClaims {
    pub run_id: String,
    pub node_id: String,
    pub interrupt_id: String,
    /// RFC 3339 UTC; the token is refused from this instant on.
    pub expires_at: String,
    pub intent: TokenIntent,
    /// Id of the key that signed the token.
    pub kid: String,
}

/// One verification key: derived from a host signing key, so the key behind tokens is
/// distinct from every other secret derived from the same signing key.
#[derive(Clone)]
pub struct TokenKey {
    id: String,
    secret: [u8; 32],
}

impl std::fmt::Debug for TokenKey {
    // The key id only: the secret never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenKey").field("id", &self.id).finish()
    }
}

impl TokenKey {
    /// The token key derived from `signing_key` (the operator's signing Secret), with its id:
    /// the first 8 hex characters of SHA-256 of the derived key (public, and says nothing of
    /// the key).
    pub fn derive(signing_key: &[u8]) -> TokenKey {
        let secret = hmac_sha256(signing_key, b"openwop-interrupt-token/v1");
        let id = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(secret))[..8].to_owned();
        TokenKey { id, secret }
    }

    pub fn id(&self) -> &str {
        &self.id
    }
}

/// The keys tokens are verified with; the first one signs.
#[derive(Debug, Clone)]
pub struct TokenKeys {
    keys: Vec<TokenKey>,
}

/// Why a token is refused. Every variant but `Expired` means "no such token" to the caller
/// (404): a forgery learns nothing about why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token is not of the form <payload>.<signature> in base64url")]
    Malformed,
    #[error("the token was signed by a key this host does not hold")]
    UnknownKey,
    #[error("the token's signature does not verify")]
    BadSignature,
    /// Authentic, but past `expiresAt` (410 `interrupt_expired`).
    #[error("the token expired at {}", .0.expires_at)]
    Expired(Box<TokenClaims>),
}

/// What a token is minted for.
#[derive(Debug, Clone, Copy)]
pub struct TokenRequest<'a> {
    pub run_id: &'a str,
    pub node_id: &'a str,
    pub interrupt_id: &'a str,
    pub intent: TokenIntent,
    /// When the token stops working (the caller caps it at the interrupt's own deadline).
    pub expires_at: OffsetDateTime,
}

impl TokenKeys {
    /// `current` signs; `previous` (rotated out) still verify.
    pub fn new(current: TokenKey, previous: impl IntoIterator<Item = TokenKey>) -> TokenKeys {
        let mut keys = vec![current];
        keys.extend(previous);
        TokenKeys { keys }
    }

    /// Id of the key new tokens are signed with.
    pub fn current_id(&self) -> &str {
        &self.keys[0].id
    }

    /// A token for `req`, signed with the current key.
    pub fn mint(&self, req: TokenRequest<'_>) -> String {
        let key = &self.keys[0];
        let claims = TokenClaims {
            run_id: req.run_id.to_owned(),
            node_id: req.node_id.to_owned(),
            interrupt_id: req.interrupt_id.to_owned(),
            expires_at: rfc3339(req.expires_at),
            intent: req.intent,
            kid: key.id.clone(),
        };
        let payload =
            B64.encode(serde_json::to_vec(&claims).expect("token claims always serialize"));
        let mac = B64.encode(hmac_sha256(&key.secret, payload.as_bytes()));
        format!("{payload}.{mac}")
    }

    /// The claims of `token` if it is authentic and unexpired at `now`.
    pub fn verify(&self, token: &str, now: OffsetDateTime) -> Result<TokenClaims, TokenError> {
        if token.len() > MAX_TOKEN_CHARS {
            return Err(TokenError::Malformed);
        }
        let (payload, mac) = token.split_once('.').ok_or(TokenError::Malformed)?;
        let mac = B64.decode(mac).map_err(|_| TokenError::Malformed)?;
        let raw = B64.decode(payload).map_err(|_| TokenError::Malformed)?;
        // The key id is read before the MAC verifies only to pick the key: an attacker who
        // names another key gets that key's (failing) check, nothing more.
        #[derive(Deserialize)]
        struct Kid {
            kid: String,
        }
        let kid: Kid = serde_json::from_slice(&raw).map_err(|_| TokenError::Malformed)?;
        let key = self
            .keys
            .iter()
            .find(|k| k.id == kid.kid)
            .ok_or(TokenError::UnknownKey)?;
        if !constant_time_eq(&hmac_sha256(&key.secret, payload.as_bytes()), &mac) {
            return Err(TokenError::BadSignature);
        }
        let claims: TokenClaims =
            serde_json::from_slice(&raw).map_err(|_| TokenError::Malformed)?;
        let expires = OffsetDateTime::parse(&claims.expires_at, &Rfc3339)
            .map_err(|_| TokenError::Malformed)?;
        if now >= expires {
            return Err(TokenError::Expired(Box::new(claims)));
        }
        Ok(claims)
    }
}

/// RFC 3339 in UTC with whole seconds (`2026-11-26T07:00:00Z`).
fn rfc3339(t: OffsetDateTime) -> String {
    let t = t
        .to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .unwrap_or(t);
    t.format(&Rfc3339).unwrap_or_default()
}

/// When a token minted at `now` stops working: `lifetime` later, but never after the
/// interrupt's own deadline (`interrupt.md`: a token MUST NOT outlive its interrupt).
pub fn token_expiry(
    now: OffsetDateTime,
    lifetime: std::time::Duration,
    interrupt_deadline: Option<OffsetDateTime>,
) -> OffsetDateTime {
    let by_lifetime = now + lifetime;
    match interrupt_deadline {
        Some(d) if d < by_lifetime => d,
        _ => by_lifetime,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-26 07:00:00 UTC);

    fn keys() -> TokenKeys {
        TokenKeys::new(TokenKey::derive(&[7u8; 40]), [])
    }

    fn req(intent: TokenIntent) -> TokenRequest<'static> {
        TokenRequest {
            run_id: "uid-1",
            node_id: "gate",
            interrupt_id: "gate/interrupt/0",
            intent,
            expires_at: NOW + time::Duration::minutes(30),
        }
    }

    #[test]
    fn a_minted_token_verifies_to_its_claims() {
        let k = keys();
        let t = k.mint(req(TokenIntent::Resolve));
        assert!(
            t.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "URL-safe: {t}"
        );
        let c = k.verify(&t, NOW).unwrap();
        assert_eq!(
            c,
            TokenClaims {
                run_id: "uid-1".into(),
                node_id: "gate".into(),
                interrupt_id: "gate/interrupt/0".into(),
                expires_at: "2026-11-26T07:30:00Z".into(),
                intent: TokenIntent::Resolve,
                kid: k.current_id().into(),
            }
        );
        // The payload is the spec's JSON, readable by anyone holding the token.
        let payload = B64.decode(t.split('.').next().unwrap()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        assert_eq!(v["intent"], "resolve");
        assert_eq!(v["runId"], "uid-1");
    }

    #[test]
    fn an_inspect_token_says_so() {
        let k = keys();
        let c = k.verify(&k.mint(req(TokenIntent::Inspect)), NOW).unwrap();
        assert_eq!(c.intent, TokenIntent::Inspect);
    }

    #[test]
    fn a_tampered_token_is_refused() {
        let k = keys();
        let t = k.mint(req(TokenIntent::Inspect));
        let (payload, mac) = t.split_once('.').unwrap();
        // The payload rewritten to say "resolve", the MAC kept.
        let raw = String::from_utf8(B64.decode(payload).unwrap()).unwrap();
        let forged = B64.encode(raw.replace("inspect", "resolve"));
        assert_eq!(
            k.verify(&format!("{forged}.{mac}"), NOW),
            Err(TokenError::BadSignature)
        );
        // One bit of the MAC flipped.
        let mut m = B64.decode(mac).unwrap();
        m[31] ^= 1;
        assert_eq!(
            k.verify(&format!("{payload}.{}", B64.encode(m)), NOW),
            Err(TokenError::BadSignature)
        );
        // Another host's key (same kid is impossible to claim without the key).
        let other = TokenKeys::new(TokenKey::derive(&[8u8; 40]), []);
        assert_eq!(other.verify(&t, NOW), Err(TokenError::UnknownKey));
        for junk in [
            "",
            "!!!not-a-valid-token!!!",
            "tok_AAAA",
            "a.b",
            payload,
            &"A".repeat(5000),
        ] {
            assert_eq!(k.verify(junk, NOW), Err(TokenError::Malformed), "{junk}");
        }
    }

    #[test]
    fn an_expired_token_is_refused_with_its_claims() {
        let k = keys();
        let t = k.mint(req(TokenIntent::Resolve));
        let at_expiry = NOW + time::Duration::minutes(30);
        match k.verify(&t, at_expiry) {
            Err(TokenError::Expired(c)) => assert_eq!(c.run_id, "uid-1"),
            other => panic!("{other:?}"),
        }
        assert!(k.verify(&t, at_expiry - time::Duration::seconds(1)).is_ok());
    }

    #[test]
    fn a_rotated_key_still_verifies_what_it_signed_and_signs_nothing_new() {
        let old = TokenKey::derive(&[1u8; 40]);
        let new = TokenKey::derive(&[2u8; 40]);
        assert_ne!(old.id(), new.id());
        let before = TokenKeys::new(old.clone(), []);
        let t = before.mint(req(TokenIntent::Resolve));
        let after = TokenKeys::new(new.clone(), [old]);
        assert!(after.verify(&t, NOW).is_ok());
        let fresh = after.mint(req(TokenIntent::Resolve));
        assert_eq!(after.verify(&fresh, NOW).unwrap().kid, new.id());
        // Once the old key is dropped, its tokens stop.
        let only_new = TokenKeys::new(new, []);
        assert_eq!(only_new.verify(&t, NOW), Err(TokenError::UnknownKey));
    }

    #[test]
    fn the_key_never_prints_and_is_distinct_from_the_signing_key() {
        let k = TokenKey::derive(b"0123456789abcdef0123456789abcdef");
        let shown = format!("{k:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert_ne!(&k.secret[..], b"0123456789abcdef0123456789abcdef");
        // A webhook secret from the same signing key is another value.
        let webhook = crate::webhook::derive_secret(b"0123456789abcdef0123456789abcdef", "", "");
        assert_ne!(webhook, hex::encode(k.secret));
    }

    #[test]
    fn expiry_is_capped_at_the_interrupt_deadline() {
        let life = std::time::Duration::from_secs(DEFAULT_TOKEN_SECONDS);
        assert_eq!(
            token_expiry(NOW, life, None),
            NOW + time::Duration::minutes(30)
        );
        let soon = NOW + time::Duration::minutes(5);
        assert_eq!(token_expiry(NOW, life, Some(soon)), soon);
        let late = NOW + time::Duration::hours(5);
        assert_eq!(
            token_expiry(NOW, life, Some(late)),
            NOW + time::Duration::minutes(30)
        );
    }
}
