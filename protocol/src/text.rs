//! Small text rules used across the crate and by the binaries: JSON Pointer escaping
//! (RFC 6901), character-bounded truncation, and a JSON value's type named in a message.

use serde_json::Value;

/// RFC 6901 escaping of one reference token: `~` → `~0`, `/` → `~1`.
pub fn escape_pointer(token: &str) -> String {
    if !token.contains(['~', '/']) {
        return token.to_owned();
    }
    token.replace('~', "~0").replace('/', "~1")
}

/// `text` cut to at most `max` characters, with `…` appended when cut.
pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// A JSON value's type as a message names it (`found an object`).
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_tokens_are_escaped() {
        assert_eq!(escape_pointer("a/b~c"), "a~1b~0c");
        assert_eq!(escape_pointer("plain"), "plain");
    }

    #[test]
    fn truncate_counts_characters_not_bytes() {
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("hé", 2), "hé");
        assert_eq!(truncate("", 0), "");
    }
}
