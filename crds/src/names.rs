//! Mapping between OpenWOP workflow ids and Kubernetes object names.
//!
//! An OpenWOP id matches `^[a-z][a-z0-9_-]*$` (up to 128 characters); a Kubernetes object
//! name is a DNS subdomain (no `_`, must end with an alphanumeric). Tools that create a
//! `Workflow` from an OpenWOP definition use [`kubernetes_name_for`] for `metadata.name`
//! and keep the original id in `spec.id`; Runs may reference either.

use sha2::{Digest, Sha256};

/// Longest object name we generate (DNS subdomain limit).
const MAX_NAME: usize = 253;

/// A valid Kubernetes object name for an OpenWOP workflow id.
///
/// Ids that already are valid names are returned unchanged. Otherwise the id is lowercased,
/// every character outside `[a-z0-9-]` becomes `-`, leading/trailing `-` are trimmed, and a
/// suffix of 10 hex digits of the id's SHA-256 is appended so that distinct ids (`a_b`, `a-b`)
/// never map to the same name.
pub fn kubernetes_name_for(id: &str) -> String {
    if is_dns_subdomain_label_chars(id) {
        return id.to_owned();
    }
    let mut base: String = id
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    base = base.trim_matches('-').to_owned();
    let digest = hex::encode(Sha256::digest(id.as_bytes()));
    let suffix = &digest[..10];
    let room = MAX_NAME - suffix.len() - 1;
    if base.len() > room {
        base.truncate(room);
        base = base.trim_end_matches('-').to_owned();
    }
    if base.is_empty() {
        format!("wf-{suffix}")
    } else {
        format!("{base}-{suffix}")
    }
}

/// True when `s` is a non-empty lowercase alphanumeric/`-` string starting and ending with an
/// alphanumeric, at most 253 characters (a valid name with no dots).
fn is_dns_subdomain_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        is_dns_subdomain_label_chars(name)
    }

    #[test]
    fn valid_ids_are_kept() {
        assert_eq!(kubernetes_name_for("support-triage"), "support-triage");
        assert_eq!(
            kubernetes_name_for("conformance-mock-1"),
            "conformance-mock-1"
        );
    }

    #[test]
    fn underscores_and_trailing_dashes_are_mapped_and_disambiguated() {
        let a = kubernetes_name_for("a_b");
        let b = kubernetes_name_for("a-b");
        assert!(a.starts_with("a-b-"), "{a}");
        assert_eq!(b, "a-b");
        assert_ne!(a, b);
        assert!(valid(&a));
        let t = kubernetes_name_for("trailing_");
        assert!(t.starts_with("trailing-") && valid(&t), "{t}");
        assert!(valid(&kubernetes_name_for("___")));
    }

    #[test]
    fn long_ids_fit_and_stay_distinct() {
        let long1 = format!("x{}_1", "a".repeat(300));
        let long2 = format!("x{}_2", "a".repeat(300));
        let n1 = kubernetes_name_for(&long1);
        let n2 = kubernetes_name_for(&long2);
        assert!(n1.len() <= MAX_NAME && valid(&n1));
        assert_ne!(n1, n2);
    }

    #[test]
    fn mapping_is_deterministic() {
        assert_eq!(
            kubernetes_name_for("my_flow"),
            kubernetes_name_for("my_flow")
        );
    }
}
