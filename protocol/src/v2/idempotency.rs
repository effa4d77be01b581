//! The v2 `Idempotency-Key` grammar (`idempotency.md` Layer 1): `^[A-Za-z0-9._~-]{22,128}$`,
//! refused with `400 idempotency_key_invalid`. The minimum length is what makes room for the
//! required 128 bits of entropy (a UUIDv4, or 16 random bytes in base64url, fits); entropy
//! itself cannot be measured from one value, so only the grammar is checked.
//!
//! Keys never appear in logs or error messages (`idempotency.md` §Keyspace): the refusal
//! names the rule, not the value, and [`IdempotencyKey`]'s `Debug` hides it.
//!
//! The v1 grammar (1..255 characters, `:` admitted) is the operator's today
//! (`operator::rest::idempotency::key_of`); a v2 request is held to this one.

use std::fmt;

use super::errors::{Code, Problem};

pub const MIN_KEY_CHARS: usize = 22;
pub const MAX_KEY_CHARS: usize = 128;

/// A key that passed the v2 grammar.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Checks a raw header value.
    pub fn parse(value: &[u8]) -> Result<IdempotencyKey, IdempotencyKeyError> {
        if !(MIN_KEY_CHARS..=MAX_KEY_CHARS).contains(&value.len()) {
            return Err(IdempotencyKeyError::Length(value.len()));
        }
        if let Some(at) = value.iter().position(|b| !key_char(*b)) {
            return Err(IdempotencyKeyError::Character { at });
        }
        // All ASCII by the check above.
        Ok(IdempotencyKey(String::from_utf8_lossy(value).into_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IdempotencyKey(..)")
    }
}

fn key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-')
}

/// Why a key is refused; neither variant carries the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdempotencyKeyError {
    #[error(
        "Idempotency-Key is {0} bytes long: use 22 to 128 characters of letters, digits, '.', '_', '~' or '-' (a UUID)"
    )]
    Length(usize),
    #[error(
        "Idempotency-Key has a character outside letters, digits, '.', '_', '~' and '-' at position {at}: send a UUID"
    )]
    Character { at: usize },
}

impl IdempotencyKeyError {
    /// `400 idempotency_key_invalid`, naming the header (an answer that is never cached).
    pub fn problem(&self) -> Problem {
        Problem::new(Code::IdempotencyKeyInvalid, self.to_string())
            .with_detail("field", "Idempotency-Key")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v2::version::Major;
    use proptest::prelude::*;

    #[test]
    fn the_grammar_table() {
        use IdempotencyKeyError::*;
        let uuid = "3f0e8c1a-7b2d-4e5f-9a10-b2c3d4e5f607";
        for (key, want) in [
            (uuid.to_owned(), Ok(())),
            ("AAECAwQFBgcICQoLDA0ODw".to_owned(), Ok(())),
            ("a".repeat(22), Ok(())),
            ("a".repeat(128), Ok(())),
            ("a.b_c~d-e.f_g~h-i.j_kl".to_owned(), Ok(())),
            ("a".repeat(21), Err(Length(21))),
            ("a".repeat(129), Err(Length(129))),
            (String::new(), Err(Length(0))),
            (format!("{}:x", "a".repeat(22)), Err(Character { at: 22 })),
            (format!("{} x", "a".repeat(22)), Err(Character { at: 22 })),
            (format!("{}/x", "a".repeat(22)), Err(Character { at: 22 })),
            (format!("{}+x", "a".repeat(22)), Err(Character { at: 22 })),
            (format!("é{}", "a".repeat(21)), Err(Character { at: 0 })),
        ] {
            let got = IdempotencyKey::parse(key.as_bytes()).map(|_| ());
            assert_eq!(got, want, "{key:?}");
        }
    }

    #[test]
    fn refusals_name_the_rule_never_the_key() {
        let secret = "do-not-log-this-value:zz";
        let e = IdempotencyKey::parse(secret.as_bytes()).unwrap_err();
        let r = e.problem().render(Major::V2);
        assert_eq!(
            (r.status, r.body.error.as_str()),
            (400, "idempotency_key_invalid")
        );
        let body = serde_json::to_string(&r.body).unwrap();
        assert!(!body.contains("do-not-log"), "{body}");
        let k = IdempotencyKey::parse("a".repeat(30).as_bytes()).unwrap();
        assert!(!format!("{k:?}").contains("aaa"));
    }

    proptest! {
        #[test]
        fn grammar_keys_pass_and_round_trip(key in "[A-Za-z0-9._~-]{22,128}") {
            let parsed = IdempotencyKey::parse(key.as_bytes()).unwrap();
            prop_assert_eq!(parsed.as_str(), key.as_str());
        }

        #[test]
        fn no_other_value_passes(key in proptest::collection::vec(any::<u8>(), 0..140)) {
            let ok = (22..=128).contains(&key.len()) && key.iter().all(|b| key_char(*b));
            prop_assert_eq!(IdempotencyKey::parse(&key).is_ok(), ok);
        }
    }
}
