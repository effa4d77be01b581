//! Lenient parsing of model output (RFC 0033 §"Recovery path", RFC 0032 §B.6).
//!
//! [`parse_lenient`] tries, in order, and stops at the first success:
//! 1. **Direct** — the whole text (surrounding whitespace ignored) is JSON.
//! 2. **Markdown fence** — the first fenced block whose info string is empty or
//!    starts with `json` (```` ```json … ``` ````) holds JSON.
//! 3. **Brace walker** — the first balanced top-level object (then array) in the
//!    text or fence, found by a string- and escape-aware bracket walk, is JSON.
//!    Leading and trailing prose is ignored.
//! 4. **JSON repair** — a conservative rewrite of that document: trailing commas
//!    removed, `//` and `/* */` comments removed, single-quoted strings
//!    re-quoted, bare identifier keys quoted, raw control characters inside
//!    strings escaped. Nothing else is guessed.
//!
//! A document that is opened but never closed is **not** completed: that is
//! what a truncated response looks like, and closing it would turn a
//! truncation into a success. It fails with [`ParseFailure::Unterminated`].
//!
//! Bounds: input size ([`ParseLimits::max_bytes`]) and nesting depth
//! ([`ParseLimits::max_depth`], never above [`MAX_DEPTH_CEILING`]) are checked
//! by iterative scans before `serde_json` sees a byte, so no input can
//! overflow the stack. Errors carry byte offsets and never any input text.

use serde_json::Value;

/// Hard ceiling on nesting depth: `serde_json`'s own recursion limit.
pub const MAX_DEPTH_CEILING: usize = 128;

/// Candidate documents the brace walker tries before giving up.
const MAX_WALK_ATTEMPTS: usize = 32;

/// Size and depth bounds for one parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// Largest accepted input, in bytes.
    pub max_bytes: usize,
    /// Deepest accepted nesting of objects and arrays (clamped to [`MAX_DEPTH_CEILING`]).
    pub max_depth: usize,
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_bytes: 4 * 1024 * 1024,
            max_depth: 64,
        }
    }
}

/// Which path produced the document; wire names match `envelope.recovery.applied.path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecoveryPath {
    Direct,
    Jsonrepair,
    MarkdownFence,
    BraceWalker,
}

impl RecoveryPath {
    /// The wire string (`direct|jsonrepair|markdown-fence|brace-walker`).
    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryPath::Direct => "direct",
            RecoveryPath::Jsonrepair => "jsonrepair",
            RecoveryPath::MarkdownFence => "markdown-fence",
            RecoveryPath::BraceWalker => "brace-walker",
        }
    }

    /// `true` for every path except [`RecoveryPath::Direct`].
    pub fn is_recovery(self) -> bool {
        self != RecoveryPath::Direct
    }
}

/// One rewrite made by the JSON-repair path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RepairKind {
    TrailingComma,
    Comment,
    SingleQuotedString,
    UnquotedKey,
    ControlCharInString,
}

/// A repair and where (byte offset in the original text) it was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repair {
    pub kind: RepairKind,
    pub byte_offset: usize,
}

/// A successfully parsed document.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovered {
    pub value: Value,
    pub path: RecoveryPath,
    /// Byte offset in the input where the recovered document starts; `None` for `Direct`.
    pub byte_offset: Option<usize>,
    /// Rewrites applied (non-empty only for [`RecoveryPath::Jsonrepair`]).
    pub repairs: Vec<Repair>,
}

/// Why no JSON document could be obtained. Messages never quote the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseFailure {
    #[error("the response is empty; expected a JSON object")]
    Empty,
    #[error(
        "the response is {len} bytes, above the {limit}-byte parse limit; ask for a smaller output"
    )]
    TooLarge { len: usize, limit: usize },
    #[error("JSON nesting deeper than {limit} levels at byte {byte_offset}; flatten the structure")]
    TooDeep { byte_offset: usize, limit: usize },
    #[error(
        "the JSON document opened at byte {byte_offset} is never closed (the response looks \
         truncated); it is not completed automatically"
    )]
    Unterminated { byte_offset: usize },
    #[error("no JSON object or array found in the response")]
    NoJson,
    #[error("invalid JSON at byte {byte_offset}: {reason}")]
    Invalid { byte_offset: usize, reason: String },
}

impl ParseFailure {
    /// Byte offset the failure points at, when it has one.
    pub fn byte_offset(&self) -> Option<usize> {
        match self {
            ParseFailure::TooDeep { byte_offset, .. }
            | ParseFailure::Unterminated { byte_offset }
            | ParseFailure::Invalid { byte_offset, .. } => Some(*byte_offset),
            _ => None,
        }
    }

    /// `true` when the text looks cut off (an unclosed document).
    pub fn looks_truncated(&self) -> bool {
        matches!(self, ParseFailure::Unterminated { .. })
    }

    fn rank(&self) -> u8 {
        match self {
            ParseFailure::TooDeep { .. } => 5,
            ParseFailure::Unterminated { .. } => 4,
            ParseFailure::Invalid { .. } => 3,
            ParseFailure::NoJson => 2,
            ParseFailure::Empty | ParseFailure::TooLarge { .. } => 1,
        }
    }
}

/// Parses `text` leniently; see the module documentation for the exact order.
pub fn parse_lenient(text: &str, limits: &ParseLimits) -> Result<Recovered, ParseFailure> {
    if text.len() > limits.max_bytes {
        return Err(ParseFailure::TooLarge {
            len: text.len(),
            limit: limits.max_bytes,
        });
    }
    let limit = limits.max_depth.min(MAX_DEPTH_CEILING);
    let (start, end) = trimmed_bounds(text, 0, text.len());
    if start == end {
        return Err(ParseFailure::Empty);
    }
    let mut worst: Option<ParseFailure> = None;
    let note = |e: ParseFailure, worst: &mut Option<ParseFailure>| {
        if worst.as_ref().is_none_or(|w| e.rank() > w.rank()) {
            *worst = Some(e);
        }
    };

    // 1. Direct.
    match parse_exact(text, start, end, limit) {
        Ok(value) => return Ok(done(value, RecoveryPath::Direct, None, Vec::new())),
        Err(e @ ParseFailure::TooDeep { .. }) => return Err(e),
        Err(e) => note(e, &mut worst),
    }

    // 2. Markdown fence.
    let fence = fence_content(text);
    if let Some((fs, fe)) = fence {
        let (s, e) = trimmed_bounds(text, fs, fe);
        if s < e {
            match parse_exact(text, s, e, limit) {
                Ok(value) => {
                    return Ok(done(
                        value,
                        RecoveryPath::MarkdownFence,
                        Some(s),
                        Vec::new(),
                    ));
                }
                Err(err @ ParseFailure::TooDeep { .. }) => return Err(err),
                Err(err) => note(err, &mut worst),
            }
        }
    }
    let (region_start, region_end) = fence.unwrap_or((0, text.len()));

    // 3. Brace walker.
    let candidates = balanced_regions(text.as_bytes(), region_start, region_end);
    for &(s, e) in candidates.iter().take(MAX_WALK_ATTEMPTS) {
        match parse_exact(text, s, e, limit) {
            Ok(value) => return Ok(done(value, RecoveryPath::BraceWalker, Some(s), Vec::new())),
            Err(err @ ParseFailure::TooDeep { .. }) => return Err(err),
            Err(err) => note(err, &mut worst),
        }
    }

    // 4. Repair, starting at the first opener of the region.
    let Some(open) = first_opener(text.as_bytes(), region_start, region_end) else {
        return Err(worst
            .filter(|w| w.rank() > 3)
            .unwrap_or(ParseFailure::NoJson));
    };
    match repair(text, open, region_end, limit) {
        Ok((fixed, repairs)) => match serde_json::from_str::<Value>(&fixed) {
            Ok(value) if !repairs.is_empty() => {
                return Ok(done(value, RecoveryPath::Jsonrepair, Some(open), repairs));
            }
            Ok(value) => return Ok(done(value, RecoveryPath::BraceWalker, Some(open), repairs)),
            // Offsets inside the rewritten text do not map back; point at the document.
            Err(e) => note(
                ParseFailure::Invalid {
                    byte_offset: open,
                    reason: describe(&e),
                },
                &mut worst,
            ),
        },
        Err(e) => note(e, &mut worst),
    }
    Err(worst.unwrap_or(ParseFailure::NoJson))
}

fn done(
    value: Value,
    path: RecoveryPath,
    byte_offset: Option<usize>,
    repairs: Vec<Repair>,
) -> Recovered {
    Recovered {
        value,
        path,
        byte_offset,
        repairs,
    }
}

fn trimmed_bounds(text: &str, start: usize, end: usize) -> (usize, usize) {
    let slice = &text[start..end];
    let lead = slice.len()
        - slice
            .trim_start_matches(|c: char| c.is_whitespace() || c == '\u{feff}')
            .len();
    let trimmed = slice.trim_end();
    let s = start + lead;
    (s, (start + trimmed.len()).max(s))
}

/// Parses exactly `text[start..end]` after an iterative depth/closure check.
fn parse_exact(text: &str, start: usize, end: usize, limit: usize) -> Result<Value, ParseFailure> {
    let bytes = text.as_bytes();
    if matches!(bytes[start], b'{' | b'[') {
        match scan(bytes, start, end, limit) {
            Scan::Closed(close) if close == end => {}
            Scan::Closed(close) => {
                return Err(ParseFailure::Invalid {
                    byte_offset: close,
                    reason: "unexpected text after the JSON document".into(),
                });
            }
            Scan::TooDeep(at) => {
                return Err(ParseFailure::TooDeep {
                    byte_offset: at,
                    limit,
                });
            }
            Scan::Open => return Err(ParseFailure::Unterminated { byte_offset: start }),
            Scan::Mismatch(at) => {
                return Err(ParseFailure::Invalid {
                    byte_offset: at,
                    reason: "closing bracket does not match the open one".into(),
                });
            }
        }
    } else if bytes[start..end].iter().any(|b| matches!(b, b'{' | b'[')) {
        // A scalar never contains brackets outside strings; bound depth anyway.
        if let Some(at) = depth_exceeded(bytes, start, end, limit) {
            return Err(ParseFailure::TooDeep {
                byte_offset: at,
                limit,
            });
        }
    }
    serde_json::from_str::<Value>(&text[start..end]).map_err(|e| ParseFailure::Invalid {
        byte_offset: start + offset_of(&text[start..end], e.line(), e.column()),
        reason: describe(&e),
    })
}

/// A serde_json error described without its position suffix (we give bytes).
fn describe(e: &serde_json::Error) -> String {
    let full = e.to_string();
    match full.rfind(" at line ") {
        Some(i) => full[..i].to_string(),
        None => full,
    }
}

/// Byte offset of serde_json's 1-based line / column (column counts bytes).
fn offset_of(text: &str, line: usize, column: usize) -> usize {
    if line == 0 {
        return 0;
    }
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line - 1)
        .map(str::len)
        .sum();
    (line_start + column.saturating_sub(1)).min(text.len())
}

enum Scan {
    /// Closed; value is the exclusive end.
    Closed(usize),
    TooDeep(usize),
    Mismatch(usize),
    Open,
}

/// String-aware walk from an opener to its matching closer.
fn scan(bytes: &[u8], start: usize, end: usize, limit: usize) -> Scan {
    let mut stack: Vec<u8> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut i = start;
    while i < end {
        let b = bytes[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' => {
                    stack.push(if b == b'{' { b'}' } else { b']' });
                    if stack.len() > limit {
                        return Scan::TooDeep(i);
                    }
                }
                b'}' | b']' => {
                    if stack.pop() != Some(b) {
                        return Scan::Mismatch(i);
                    }
                    if stack.is_empty() {
                        return Scan::Closed(i + 1);
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    Scan::Open
}

fn depth_exceeded(bytes: &[u8], start: usize, end: usize, limit: usize) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate().take(end).skip(start) {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    return Some(i);
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Content range of the first fenced block tagged `json…` or untagged.
/// An unclosed fence runs to the end of the text.
fn fence_content(text: &str) -> Option<(usize, usize)> {
    let mut search = 0;
    while let Some(rel) = text[search..].find("```") {
        let open = search + rel;
        let info_start = open + 3;
        let info_end = text[info_start..]
            .find('\n')
            .map_or(text.len(), |n| info_start + n);
        let info = text[info_start..info_end].trim().to_ascii_lowercase();
        let content_start = (info_end + 1).min(text.len());
        let close = closing_fence(text, content_start);
        if info.is_empty() || info.starts_with("json") {
            return Some((content_start, close.unwrap_or(text.len())));
        }
        match close {
            Some(c) => search = c + 3,
            None => return None,
        }
    }
    None
}

/// The closing fence after `from`: three backticks that start a line (after optional
/// blanks). Backticks inside the JSON (e.g. in a string value) do not close the block.
fn closing_fence(text: &str, from: usize) -> Option<usize> {
    let mut search = from;
    while let Some(rel) = text[search..].find("```") {
        let at = search + rel;
        let line_start = text[..at].rfind('\n').map_or(0, |n| n + 1);
        if line_start >= from && text[line_start..at].trim().is_empty() {
            return Some(at);
        }
        search = at + 3;
    }
    None
}

fn first_opener(bytes: &[u8], start: usize, end: usize) -> Option<usize> {
    bytes[start..end]
        .iter()
        .position(|b| matches!(b, b'{' | b'['))
        .map(|p| start + p)
}

/// Maximal balanced bracket regions, objects first, each in text order.
/// Quotes only count inside brackets, so prose quotes cannot derail the walk.
fn balanced_regions(bytes: &[u8], start: usize, end: usize) -> Vec<(usize, usize)> {
    let mut stack: Vec<(usize, u8)> = Vec::new();
    let mut found: Vec<(usize, usize)> = Vec::new();
    let (mut in_string, mut escaped) = (false, false);
    for (i, &b) in bytes.iter().enumerate().take(end).skip(start) {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' if !stack.is_empty() => in_string = true,
            b'{' => stack.push((i, b'}')),
            b'[' => stack.push((i, b']')),
            b'}' | b']' => match stack.pop() {
                Some((open, want)) if want == b => {
                    // Drop regions nested in this one: only maximal ones are candidates.
                    while found.last().is_some_and(|&(s, _)| s > open) {
                        found.pop();
                    }
                    found.push((open, i + 1));
                }
                _ => stack.clear(),
            },
            _ => {}
        }
    }
    let (mut objects, arrays): (Vec<_>, Vec<_>) =
        found.into_iter().partition(|&(s, _)| bytes[s] == b'{');
    objects.extend(arrays);
    objects
}

/// Conservative rewrite of the document starting at `open` (see module docs).
/// Returns the rewritten document and the repairs made.
fn repair(
    text: &str,
    open: usize,
    end: usize,
    limit: usize,
) -> Result<(String, Vec<Repair>), ParseFailure> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(end - open + 16);
    let mut repairs = Vec::new();
    // (closer, expecting a key) per open container.
    let mut stack: Vec<(u8, bool)> = Vec::new();
    let mut i = open;
    while i < end {
        let b = bytes[i];
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => {
                out.push(b as char);
                i += 1;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                repairs.push(Repair {
                    kind: RepairKind::Comment,
                    byte_offset: i,
                });
                i = text[i..end].find('\n').map_or(end, |n| i + n);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                repairs.push(Repair {
                    kind: RepairKind::Comment,
                    byte_offset: i,
                });
                match text[i + 2..end].find("*/") {
                    Some(n) => i = i + 2 + n + 2,
                    None => return Err(ParseFailure::Unterminated { byte_offset: open }),
                }
            }
            b'{' | b'[' => {
                stack.push(if b == b'{' {
                    (b'}', true)
                } else {
                    (b']', false)
                });
                if stack.len() > limit {
                    return Err(ParseFailure::TooDeep {
                        byte_offset: i,
                        limit,
                    });
                }
                out.push(b as char);
                i += 1;
            }
            b'}' | b']' => {
                match stack.pop() {
                    Some((want, _)) if want == b => {}
                    _ => {
                        return Err(ParseFailure::Invalid {
                            byte_offset: i,
                            reason: "closing bracket does not match the open one".into(),
                        });
                    }
                }
                let kept = out.trim_end().len();
                if out[..kept].ends_with(',') {
                    repairs.push(Repair {
                        kind: RepairKind::TrailingComma,
                        byte_offset: i,
                    });
                    out.truncate(kept - 1);
                }
                out.push(b as char);
                i += 1;
                if stack.is_empty() {
                    return Ok((out, repairs));
                }
            }
            b',' => {
                if let Some(top) = stack.last_mut() {
                    top.1 = top.0 == b'}';
                }
                out.push(',');
                i += 1;
            }
            b':' => {
                if let Some(top) = stack.last_mut() {
                    top.1 = false;
                }
                out.push(':');
                i += 1;
            }
            b'"' | b'\'' => {
                if b == b'\'' {
                    repairs.push(Repair {
                        kind: RepairKind::SingleQuotedString,
                        byte_offset: i,
                    });
                }
                i = copy_string(text, i, end, b, &mut out, &mut repairs)
                    .ok_or(ParseFailure::Unterminated { byte_offset: open })?;
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b'$' => {
                let s = i;
                while i < end
                    && (bytes[i].is_ascii_alphanumeric() || matches!(bytes[i], b'_' | b'$' | b'-'))
                {
                    i += 1;
                }
                let word = &text[s..i];
                let key_position = stack.last().is_some_and(|t| t.1);
                let next = text[i..end].trim_start().as_bytes().first().copied();
                if key_position && next == Some(b':') {
                    repairs.push(Repair {
                        kind: RepairKind::UnquotedKey,
                        byte_offset: s,
                    });
                    out.push('"');
                    out.push_str(word);
                    out.push('"');
                } else {
                    out.push_str(word);
                }
            }
            _ => {
                // Numbers and anything else pass through; serde_json judges them.
                let ch_len = text[i..].chars().next().map_or(1, char::len_utf8);
                out.push_str(&text[i..i + ch_len]);
                i += ch_len;
            }
        }
    }
    Err(ParseFailure::Unterminated { byte_offset: open })
}

/// Copies a string starting at `start` (its quote `q`) as a double-quoted JSON
/// string. Returns the index after the closing quote, `None` if unclosed.
fn copy_string(
    text: &str,
    start: usize,
    end: usize,
    q: u8,
    out: &mut String,
    repairs: &mut Vec<Repair>,
) -> Option<usize> {
    out.push('"');
    let mut chars = text[start + 1..end].char_indices();
    let mut control_noted = false;
    while let Some((off, c)) = chars.next() {
        let at = start + 1 + off;
        match c {
            '\\' => {
                let (_, n) = chars.next()?;
                if q == b'\'' && n == '\'' {
                    out.push('\'');
                } else {
                    out.push('\\');
                    out.push(n);
                }
            }
            c if c as u32 == q as u32 => {
                out.push('"');
                return Some(at + 1);
            }
            '"' => out.push_str("\\\""),
            c if (c as u32) < 0x20 => {
                if !control_noted {
                    repairs.push(Repair {
                        kind: RepairKind::ControlCharInString,
                        byte_offset: at,
                    });
                    control_noted = true;
                }
                match c {
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    other => out.push_str(&format!("\\u{:04x}", other as u32)),
                }
            }
            c => out.push(c),
        }
    }
    None
}
