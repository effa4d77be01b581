//! SR-1 secret redaction (`agent-memory.md` §"SR-1", `ai-envelope.md` §"Redaction").
//!
//! A [`Redactor`] is built once per run from the run's resolved secrets and then
//! applied to every string that can leave the engine: envelope payloads (every
//! string leaf **and** every object key, open-shape bags and `reasoning`
//! included), event payloads, error messages and span attributes.
//!
//! Matching rules (decided here, tested in `tests/redact.rs`):
//! - Known secret values are matched as plain substrings (never regex) with one
//!   Aho-Corasick automaton over all values, so hundreds of secrets cost one pass.
//! - All occurrences are found, overlapping ones included, and merged into
//!   maximal spans: a secret nested in a longer one is redacted once with the
//!   longer secret's marker; two partially overlapping secrets are redacted as
//!   one span carrying both markers, so no fragment of either survives.
//! - Each redacted secret occurrence becomes `[REDACTED:<secretId>]` and counts 1.
//! - `secret:` reference tokens — `secret:` followed by one or more of
//!   `[A-Za-z0-9_./-]` (trailing `.` excluded, so sentence punctuation stays) —
//!   are replaced with `[REDACTED:<id>]` when `<id>` is a known secret id and
//!   with `[REDACTED:secret-ref]` otherwise (the text after `secret:` may itself
//!   be a plaintext, so an unknown id is never echoed). Each token counts 1.
//! - Secret values shorter than [`MIN_SECRET_CHARS`] characters are not matched:
//!   redacting a 2-character value would shred ordinary text. This follows the
//!   SR-1 reference floor (8 characters, the gitleaks/TruffleHog convention).
//!   [`Redactor::new`] records such ids in [`Redactor::unredactable_secret_ids`];
//!   [`Redactor::try_new`] refuses them with [`RedactorError::SecretTooShort`].
//! - Output is re-checked: if a marker glued to neighbouring text happens to spell
//!   a secret value, the string is redacted again (bounded), and as a last resort
//!   replaced whole by [`FALLBACK_MARKER`]. No known value ever survives.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};
use serde_json::{Map, Value};

/// Secret values shorter than this many characters are never matched (SR-1 floor).
pub const MIN_SECRET_CHARS: usize = 8;

/// The prefix of a secret reference token.
pub const SECRET_TOKEN_PREFIX: &str = "secret:";

/// Marker used for `secret:` tokens whose id is not a known secret id.
pub const UNKNOWN_REF_MARKER: &str = "[REDACTED:secret-ref]";

/// Marker that replaces a whole string when repeated redaction cannot settle.
pub const FALLBACK_MARKER: &str = "[REDACTED]";

/// Redaction passes over one string before falling back to [`FALLBACK_MARKER`].
const MAX_PASSES: usize = 4;

/// Nesting levels [`Redactor::redact_value`] walks by recursion.
const INLINE_DEPTH: usize = 32;

/// Why a secret set was refused by [`Redactor::try_new`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedactorError {
    /// The value is too short to redact without destroying ordinary text.
    #[error(
        "secret `{secret_id}` is shorter than {min} characters and cannot be redacted safely; \
         use a longer credential or keep it out of the run's secret set"
    )]
    SecretTooShort { secret_id: String, min: usize },
    /// The id is empty; a marker needs an id.
    #[error("a secret has an empty secretId; every secret needs a non-empty id for its marker")]
    EmptySecretId,
    /// The automaton could not be built (pattern set too large for the matcher).
    #[error("could not build the redaction matcher: {0}")]
    Build(String),
}

/// One run's redaction harness. Build once, share by reference.
pub struct Redactor {
    /// Automaton over every redactable secret value plus the `secret:` prefix
    /// (the last pattern). `None` only when there is nothing to match, which
    /// cannot happen because the prefix is always present.
    matcher: AhoCorasick,
    /// Marker per secret pattern, index = pattern id.
    markers: Vec<String>,
    /// Length in bytes per secret pattern, index = pattern id.
    lengths: Vec<usize>,
    /// Known secret id → marker, for `secret:<id>` tokens.
    id_markers: HashMap<String, String>,
    /// Ids whose values were too short to match.
    unredactable: Vec<String>,
    /// Shortest text (in bytes) that can hold a hit: strings shorter than this
    /// are skipped without running the automaton (most keys and short values).
    min_hit_len: usize,
}

impl fmt::Debug for Redactor {
    // Never print values; ids and counts only say how big the set is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.markers.len())
            .field("unredactable", &self.unredactable.len())
            .finish_non_exhaustive()
    }
}

impl Default for Redactor {
    /// A redactor with no known secrets: still redacts `secret:` tokens.
    fn default() -> Self {
        Self::new(std::iter::empty())
    }
}

/// A matched span before markers are chosen.
#[derive(Clone, Copy)]
struct Hit {
    start: usize,
    end: usize,
    /// Pattern id for secret values, `None` for a `secret:` token.
    pattern: Option<usize>,
}

impl Redactor {
    /// Builds the harness. Values shorter than [`MIN_SECRET_CHARS`] (and empty
    /// ids) are skipped and reported by [`Self::unredactable_secret_ids`];
    /// callers that must not run with such secrets use [`Self::try_new`].
    pub fn new(secrets: impl IntoIterator<Item = (String, String)>) -> Redactor {
        Self::build(secrets, false).unwrap_or_else(|_| Self::prefix_only())
    }

    /// Like [`Self::new`] but refuses secrets that cannot be redacted safely.
    pub fn try_new(
        secrets: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Redactor, RedactorError> {
        Self::build(secrets, true)
    }

    fn prefix_only() -> Redactor {
        Self::build(std::iter::empty(), false).expect("a single fixed pattern always builds")
    }

    fn build(
        secrets: impl IntoIterator<Item = (String, String)>,
        strict: bool,
    ) -> Result<Redactor, RedactorError> {
        let mut values: Vec<String> = Vec::new();
        let mut ids: Vec<String> = Vec::new();
        let mut unredactable = Vec::new();
        for (id, value) in secrets {
            if id.is_empty() {
                if strict {
                    return Err(RedactorError::EmptySecretId);
                }
                unredactable.push(id);
                continue;
            }
            if value.chars().count() < MIN_SECRET_CHARS {
                if strict {
                    return Err(RedactorError::SecretTooShort {
                        secret_id: id,
                        min: MIN_SECRET_CHARS,
                    });
                }
                unredactable.push(id);
                continue;
            }
            ids.push(id);
            values.push(value);
        }

        let mut patterns: Vec<&str> = values.iter().map(String::as_str).collect();
        patterns.push(SECRET_TOKEN_PREFIX);
        let matcher = AhoCorasickBuilder::new()
            .match_kind(MatchKind::Standard)
            .kind(Some(AhoCorasickKind::DFA))
            .build(&patterns)
            .or_else(|_| {
                // Very large sets can exceed the DFA budget; the NFA is slower but unbounded.
                AhoCorasickBuilder::new()
                    .match_kind(MatchKind::Standard)
                    .build(&patterns)
            })
            .map_err(|e| RedactorError::Build(e.to_string()))?;

        let lengths: Vec<usize> = values.iter().map(String::len).collect();
        // A `secret:` token needs at least one id byte after the prefix.
        let min_hit_len = lengths
            .iter()
            .copied()
            .chain([SECRET_TOKEN_PREFIX.len() + 1])
            .min()
            .unwrap_or(0);
        let mut redactor = Redactor {
            matcher,
            markers: Vec::with_capacity(ids.len()),
            lengths,
            id_markers: HashMap::new(),
            unredactable,
            min_hit_len,
        };
        // A marker must not itself contain a secret value (e.g. a secret equal to its id).
        for (n, id) in ids.iter().enumerate() {
            let marker = redactor.safe_marker(&format!("[REDACTED:{id}]"), n);
            redactor
                .id_markers
                .entry(id.clone())
                .or_insert_with(|| marker.clone());
            redactor.markers.push(marker);
        }
        Ok(redactor)
    }

    /// A marker that neither contains a secret value nor a `secret:` token, so
    /// a second pass over redacted text finds nothing in the markers themselves.
    fn safe_marker(&self, preferred: &str, n: usize) -> String {
        let candidates = [
            preferred.to_string(),
            format!("[REDACTED:#{n}]"),
            format!("<redacted #{n}>"),
        ];
        candidates
            .into_iter()
            .find(|c| !self.has_hit(c))
            .unwrap_or_default()
    }

    /// Whether `s` holds anything this redactor would replace.
    fn has_hit(&self, s: &str) -> bool {
        if s.len() < self.min_hit_len {
            return false;
        }
        let prefix_id = self.lengths.len();
        self.matcher
            .find_overlapping_iter(s)
            .any(|m| m.pattern().as_usize() != prefix_id || token_id_end(s, m.end()) > m.end())
    }

    /// Number of secret values this redactor matches.
    pub fn secret_count(&self) -> usize {
        self.markers.len()
    }

    /// Ids of secrets that were skipped because their value is shorter than
    /// [`MIN_SECRET_CHARS`] characters (or their id was empty).
    pub fn unredactable_secret_ids(&self) -> &[String] {
        &self.unredactable
    }

    /// Redacts one string. Returns the input borrowed (no allocation) when there
    /// is nothing to redact, and the number of replacements made.
    pub fn redact_str<'a>(&self, s: &'a str) -> (Cow<'a, str>, usize) {
        let Some(first) = self.redact_pass(s) else {
            return (Cow::Borrowed(s), 0);
        };
        let (mut out, mut count) = first;
        for _ in 1..MAX_PASSES {
            match self.redact_pass(&out) {
                None => return (Cow::Owned(out), count),
                Some((next, n)) => {
                    out = next;
                    count += n;
                }
            }
        }
        if self.has_hit(&out) {
            let fallback = if !self.has_hit(FALLBACK_MARKER) {
                FALLBACK_MARKER
            } else {
                ""
            };
            return (Cow::Owned(fallback.to_string()), count);
        }
        (Cow::Owned(out), count)
    }

    /// Redacts a `String` in place (span attributes, error messages).
    pub fn redact_in_place(&self, s: &mut String) -> usize {
        let (out, n) = self.redact_str(s);
        if let Cow::Owned(o) = out {
            *s = o;
        }
        n
    }

    /// Redacts every string leaf and every object key of `v`, at any depth.
    /// Returns the number of replacements.
    pub fn redact_value(&self, v: &mut Value) -> usize {
        self.redact_nested(v, 0)
    }

    /// Recursion for the first [`INLINE_DEPTH`] levels (typical payloads
    /// allocate nothing), then [`Self::redact_deep`]'s heap stack, so hostile
    /// nesting cannot overflow the call stack.
    fn redact_nested(&self, v: &mut Value, depth: usize) -> usize {
        if depth >= INLINE_DEPTH {
            return self.redact_deep(v);
        }
        match v {
            Value::String(s) => self.redact_in_place(s),
            Value::Array(items) => items
                .iter_mut()
                .map(|item| self.redact_nested(item, depth + 1))
                .sum(),
            Value::Object(map) => {
                let mut count = self.redact_keys(map);
                for child in map.values_mut() {
                    count += self.redact_nested(child, depth + 1);
                }
                count
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        }
    }

    /// The walk without recursion, for values nested deeper than [`INLINE_DEPTH`].
    fn redact_deep(&self, v: &mut Value) -> usize {
        let mut count = 0;
        let mut stack: Vec<&mut Value> = vec![v];
        while let Some(node) = stack.pop() {
            match node {
                Value::String(s) => count += self.redact_in_place(s),
                Value::Array(items) => stack.extend(items.iter_mut()),
                Value::Object(map) => {
                    count += self.redact_keys(map);
                    stack.extend(map.values_mut());
                }
                Value::Null | Value::Bool(_) | Value::Number(_) => {}
            }
        }
        count
    }

    /// Rewrites keys that contain secrets. Keys that collide after redaction get
    /// a `~N` suffix so no member is lost.
    fn redact_keys(&self, map: &mut Map<String, Value>) -> usize {
        if !map.keys().any(|k| self.has_hit(k)) {
            return 0;
        }
        let mut count = 0;
        let old = std::mem::take(map);
        let mut renamed: Vec<(String, Value)> = Vec::with_capacity(old.len());
        for (k, v) in old {
            let (nk, n) = self.redact_str(&k);
            count += n;
            renamed.push((nk.into_owned(), v));
        }
        for (base, v) in renamed {
            let mut key = base.clone();
            let mut suffix = 1;
            while map.contains_key(&key) {
                key = format!("{base}~{suffix}");
                suffix += 1;
            }
            map.insert(key, v);
        }
        count
    }

    /// One redaction pass; `None` when nothing matched (no allocation).
    fn redact_pass(&self, s: &str) -> Option<(String, usize)> {
        if s.len() < self.min_hit_len {
            return None;
        }
        let mut hits: Vec<Hit> = Vec::new();
        let prefix_id = self.lengths.len();
        for m in self.matcher.find_overlapping_iter(s) {
            let p = m.pattern().as_usize();
            if p == prefix_id {
                let id_end = token_id_end(s, m.end());
                if id_end > m.end() {
                    hits.push(Hit {
                        start: m.start(),
                        end: id_end,
                        pattern: None,
                    });
                }
            } else {
                hits.push(Hit {
                    start: m.start(),
                    end: m.end(),
                    pattern: Some(p),
                });
            }
        }
        if hits.is_empty() {
            return None;
        }
        // Longest first at equal start so contained hits can be dropped.
        hits.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));

        let mut out = String::with_capacity(s.len() + 16 * hits.len());
        let mut count = 0;
        let mut cursor = 0;
        let mut i = 0;
        while i < hits.len() {
            let span_start = hits[i].start;
            let mut span_end = hits[i].end;
            let mut members = vec![hits[i]];
            let mut j = i + 1;
            while j < hits.len() && hits[j].start < span_end {
                if hits[j].end > span_end {
                    span_end = hits[j].end;
                    members.push(hits[j]);
                }
                // Hits inside what is already covered add nothing.
                j += 1;
            }
            out.push_str(&s[cursor..span_start]);
            for h in &members {
                out.push_str(&self.marker_for(s, h));
            }
            count += members.len();
            cursor = span_end;
            i = j;
        }
        out.push_str(&s[cursor..]);
        Some((out, count))
    }

    fn marker_for(&self, s: &str, h: &Hit) -> Cow<'_, str> {
        match h.pattern {
            Some(p) => Cow::Borrowed(self.markers[p].as_str()),
            None => {
                let id = &s[h.start + SECRET_TOKEN_PREFIX.len()..h.end];
                match self.id_markers.get(id) {
                    Some(m) => Cow::Borrowed(m.as_str()),
                    None => Cow::Borrowed(UNKNOWN_REF_MARKER),
                }
            }
        }
    }
}

fn is_token_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'/')
}

/// End (exclusive) of the id following a `secret:` prefix ending at `from`.
fn token_id_end(s: &str, from: usize) -> usize {
    let bytes = s.as_bytes();
    let mut end = from;
    while end < bytes.len() && is_token_id_byte(bytes[end]) {
        end += 1;
    }
    while end > from && bytes[end - 1] == b'.' {
        end -= 1;
    }
    end
}
