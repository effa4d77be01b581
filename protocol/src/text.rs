//! Two small text rules used across the crate and by the binaries: JSON Pointer escaping
//! (RFC 6901) and character-bounded truncation.

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
