//! Protocol versions: the `<major>.<minor>` grammar (`versioning.md` §2, axis 1) and the two
//! majors this host has a representation for. The bottom of `v2`: every other part names a
//! major through [`Major`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A major this host can answer in. Through the overlap it serves both; the engine is one,
/// the representation on the wire is chosen per request ([`super::negotiate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Major {
    V1,
    V2,
}

impl Major {
    pub const ALL: [Major; 2] = [Major::V1, Major::V2];

    /// The major as the wire numbers it.
    pub fn number(self) -> u32 {
        match self {
            Major::V1 => 1,
            Major::V2 => 2,
        }
    }

    /// `None` for a major this host has no representation for.
    pub fn from_number(n: u32) -> Option<Major> {
        Major::ALL.into_iter().find(|m| m.number() == n)
    }
}

impl fmt::Display for Major {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}

/// A `<major>.<minor>` value: `^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`, the grammar of
/// `protocolVersions[]`, `preferredVersion`, `minClientVersion` and the response's
/// `OpenWOP-Version`. Ordered by major, then minor (how `minClientVersion` compares).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProtocolVersion {
    pub major: u32,
    pub minor: u32,
}

impl ProtocolVersion {
    pub const fn new(major: u32, minor: u32) -> Self {
        ProtocolVersion { major, minor }
    }
}

/// A value outside the `<major>.<minor>` grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a protocol version: use <major>.<minor>, decimal numbers without leading zeros (e.g. 2.0)"
)]
pub struct VersionSyntaxError(pub String);

impl FromStr for ProtocolVersion {
    type Err = VersionSyntaxError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || VersionSyntaxError(s.to_owned());
        let (major, minor) = s.split_once('.').ok_or_else(bad)?;
        Ok(ProtocolVersion {
            major: number(major).ok_or_else(bad)?,
            minor: number(minor).ok_or_else(bad)?,
        })
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Serialize for ProtocolVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ProtocolVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One grammar number: `0` or digits without a leading zero, within `u32` (a larger value
/// names no version anyone serves; refusing it keeps the arithmetic total).
pub(crate) fn number(s: &str) -> Option<u32> {
    let leading_zero = s.len() > 1 && s.starts_with('0');
    if s.is_empty() || leading_zero || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_grammar_admits_major_dot_minor_only() {
        for (s, want) in [
            ("1.0", Some((1, 0))),
            ("2.0", Some((2, 0))),
            ("1.3", Some((1, 3))),
            ("0.0", Some((0, 0))),
            ("10.12", Some((10, 12))),
            ("2", None),
            ("2.", None),
            (".2", None),
            ("02.0", None),
            ("2.00", None),
            ("2.0.1", None),
            ("+2.0", None),
            (" 2.0", None),
            ("2.0 ", None),
            ("v2.0", None),
            ("4294967296.0", None),
            ("", None),
        ] {
            let got = s
                .parse::<ProtocolVersion>()
                .ok()
                .map(|v| (v.major, v.minor));
            assert_eq!(got, want, "{s:?}");
        }
    }

    #[test]
    fn versions_order_by_major_then_minor_and_serialize_as_strings() {
        assert!(ProtocolVersion::new(1, 9) < ProtocolVersion::new(2, 0));
        assert!(ProtocolVersion::new(2, 1) > ProtocolVersion::new(2, 0));
        let v: ProtocolVersion = serde_json::from_value(serde_json::json!("2.3")).unwrap();
        assert_eq!(serde_json::to_value(v).unwrap(), serde_json::json!("2.3"));
        assert!(serde_json::from_value::<ProtocolVersion>(serde_json::json!("2")).is_err());
    }

    #[test]
    fn majors_number_as_the_wire_does() {
        assert_eq!(Major::from_number(1), Some(Major::V1));
        assert_eq!(Major::from_number(2), Some(Major::V2));
        assert_eq!(Major::from_number(3), None);
        assert_eq!(Major::V2.to_string(), "2");
    }

    proptest! {
        #[test]
        fn display_and_parse_round_trip(major in any::<u32>(), minor in any::<u32>()) {
            let v = ProtocolVersion::new(major, minor);
            prop_assert_eq!(v.to_string().parse::<ProtocolVersion>(), Ok(v));
        }
    }
}
