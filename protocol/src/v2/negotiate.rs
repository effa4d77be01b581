//! Major negotiation (`versioning.md` §1, `headers.md`): which major a request is served in,
//! or the refusal, from its path, its `OpenWOP-Version` header and what the host advertises;
//! the `OpenWOP-Version` value the response carries; whether the response varies on the
//! header; and `OpenWOP-Client-Version`, which never selects and never fails a request.
//!
//! | request | answer |
//! | --- | --- |
//! | header names an advertised major (`2` and `2.0` alike; only the major selects) | that major |
//! | header names a major not advertised, or is not a version | `406 protocol_version_unsupported`, `details.protocolVersions` |
//! | `/v1/…` with a header other than major 1 | `400 protocol_version_mismatch` |
//! | no header, `/.well-known/openwop` | `preferredVersion`'s major |
//! | no header, any other unversioned path | 2 |
//!
//! The header-less row for unversioned paths other than discovery is the 2.42.8 correction
//! (`headers.md`, the OpenAPI `OpenWOP-Version` parameter): `versioning.md` §1.3 still says
//! every header-less unversioned request gets `preferredVersion`'s major, which through the
//! overlap would be 1.

use super::errors::{Code, Problem};
use super::version::{Major, ProtocolVersion, number};

/// The path of the one discovery resource, whose representation the header selects.
pub const DISCOVERY_PATH: &str = "/.well-known/openwop";

/// The first segments of the operations of the v2 path manifest (`spec/v2/path-manifest.json`,
/// 55 operations): an unversioned path under one of them (`/runs`, `/runs:bulk-cancel`,
/// `/openapi.json`) is a protocol operation, negotiated even on a host that serves no v2, so
/// a v2 client is told which versions are served instead of meeting a bare 404. Every other
/// unversioned path is the host's own (its web UI, metrics, probes) and is not negotiated.
pub const MANIFEST_SEGMENTS: [&str; 12] = [
    "agents",
    "audit",
    "content",
    "host",
    "interrupts",
    "openapi.json",
    "prompts",
    "runs",
    "tools",
    "trigger-subscriptions",
    "webhooks",
    "workflows",
];

/// Where a request landed, as negotiation sees it. Only protocol operations are negotiated:
/// the UI, conformance seams and host-proprietary paths are routed around this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathClass {
    /// `/v1` or `/v1/…`: the v1 path space, kept through the overlap.
    V1,
    /// [`DISCOVERY_PATH`].
    Discovery,
    /// Any other path: the v2 surface (there is no `/v2/` path space).
    Unversioned,
}

impl PathClass {
    /// The class of a request path (without query).
    pub fn of(path: &str) -> PathClass {
        if path == "/v1" || path.starts_with("/v1/") {
            PathClass::V1
        } else if path == DISCOVERY_PATH {
            PathClass::Discovery
        } else {
            PathClass::Unversioned
        }
    }

    /// The class of a path that is a protocol operation (`/v1/…`, discovery, or an
    /// unversioned path under one of [`MANIFEST_SEGMENTS`]); `None` for the host's own paths.
    pub fn of_protocol(path: &str) -> Option<PathClass> {
        match PathClass::of(path) {
            PathClass::Unversioned => {
                let first = path
                    .trim_start_matches('/')
                    .split(['/', ':'])
                    .next()
                    .unwrap_or_default();
                MANIFEST_SEGMENTS
                    .contains(&first)
                    .then_some(PathClass::Unversioned)
            }
            class => Some(class),
        }
    }

    /// Whether the answer at this path depends on `OpenWOP-Version`, so a cache must key on
    /// it (`Vary: OpenWOP-Version`). Every unversioned path does: the header may select
    /// either advertised major there. A `/v1/…` answer does not: the only value it admits
    /// is `1`, the same as none.
    pub fn varies_on_version(self) -> bool {
        !matches!(self, PathClass::V1)
    }
}

/// What an `OpenWOP-Version` request value names: `<major>` or `<major>.<minor>`. The minor
/// is informational (`versioning.md` §1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestedVersion {
    pub major: u32,
    pub minor: Option<u32>,
}

impl RequestedVersion {
    /// Parses a header value (surrounding spaces and tabs ignored). `None` when it is no
    /// version: a list, a word, a leading zero, a number past `u32`.
    pub fn parse(value: &[u8]) -> Option<RequestedVersion> {
        let s = std::str::from_utf8(value).ok()?.trim_matches([' ', '\t']);
        match s.split_once('.') {
            None => Some(RequestedVersion {
                major: number(s)?,
                minor: None,
            }),
            Some((major, minor)) => Some(RequestedVersion {
                major: number(major)?,
                minor: Some(number(minor)?),
            }),
        }
    }
}

/// What the host advertises: `protocolVersions[]` (at most one minor per major) and
/// `preferredVersion`, checked against `versioning.md` §1.1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertised {
    v1: Option<ProtocolVersion>,
    v2: Option<ProtocolVersion>,
    preferred: Major,
}

/// An advertisement `versioning.md` §1.1 does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdvertisedError {
    #[error("protocolVersions is empty: advertise at least one <major>.<minor> this host serves")]
    Empty,
    #[error("protocolVersions lists {0}: this host has representations for majors 1 and 2 only")]
    UnknownMajor(ProtocolVersion),
    #[error(
        "protocolVersions lists major {0} twice: advertise the one <major>.<minor> served per major"
    )]
    DuplicateMajor(u32),
    #[error("preferredVersion {0} is not a member of protocolVersions")]
    PreferredNotListed(ProtocolVersion),
    #[error(
        "preferredVersion {0} while a 1.x version is advertised: through the overlap preferredVersion must name the 1.x member (a header-less request is a v1 client's)"
    )]
    PreferredNotV1DuringOverlap(ProtocolVersion),
}

impl Advertised {
    pub fn new(
        versions: &[ProtocolVersion],
        preferred: ProtocolVersion,
    ) -> Result<Advertised, AdvertisedError> {
        if versions.is_empty() {
            return Err(AdvertisedError::Empty);
        }
        let (mut v1, mut v2) = (None, None);
        for v in versions {
            let slot = match Major::from_number(v.major) {
                Some(Major::V1) => &mut v1,
                Some(Major::V2) => &mut v2,
                None => return Err(AdvertisedError::UnknownMajor(*v)),
            };
            if slot.replace(*v).is_some() {
                return Err(AdvertisedError::DuplicateMajor(v.major));
            }
        }
        if !versions.contains(&preferred) {
            return Err(AdvertisedError::PreferredNotListed(preferred));
        }
        if v1.is_some() && preferred.major != 1 {
            return Err(AdvertisedError::PreferredNotV1DuringOverlap(preferred));
        }
        let preferred =
            Major::from_number(preferred.major).ok_or(AdvertisedError::UnknownMajor(preferred))?;
        Ok(Advertised { v1, v2, preferred })
    }

    /// The advertised `<major>.<minor>` of `major`, if served.
    pub fn version_of(&self, major: Major) -> Option<ProtocolVersion> {
        match major {
            Major::V1 => self.v1,
            Major::V2 => self.v2,
        }
    }

    pub fn serves(&self, major: Major) -> bool {
        self.version_of(major).is_some()
    }

    /// `protocolVersions[]`, ascending.
    pub fn protocol_versions(&self) -> Vec<ProtocolVersion> {
        self.v1.into_iter().chain(self.v2).collect()
    }

    /// `preferredVersion`.
    pub fn preferred(&self) -> ProtocolVersion {
        self.version_of(self.preferred)
            .expect("Advertised::new keeps the preferred major advertised")
    }

    /// The advertised version of `requested`'s major.
    fn select(&self, requested: RequestedVersion) -> Option<ProtocolVersion> {
        Major::from_number(requested.major).and_then(|m| self.version_of(m))
    }
}

/// A request served: in `version`'s major, which the response's `OpenWOP-Version` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// The advertised `<major>.<minor>` of the major served.
    pub version: ProtocolVersion,
    /// Whether the response carries `Vary: OpenWOP-Version`.
    pub vary: bool,
}

impl Negotiated {
    pub fn major(&self) -> Major {
        Major::from_number(self.version.major).expect("only advertised majors are negotiated")
    }

    /// The response's `OpenWOP-Version` value, `<major>.<minor>`.
    pub fn header_value(&self) -> String {
        self.version.to_string()
    }
}

/// Why a request is refused before any handler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefusalReason {
    /// The header names a major not advertised, or is not a version (406).
    Unsupported,
    /// A `/v1/…` request whose header names another major, or is not a version (400).
    Mismatch,
    /// The path's major is not advertised, and the request named none: `/v1/…` after v1 is
    /// retired, or an unversioned path on a host that serves no v2 (404, no such operation).
    NotServed(Major),
}

/// A refused request. The refusal is itself a protocol response: `version` is the contract
/// it is answered under (the path's default), named by its `OpenWOP-Version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: RefusalReason,
    pub version: ProtocolVersion,
    pub vary: bool,
    advertised: Vec<ProtocolVersion>,
}

impl Refusal {
    pub fn major(&self) -> Major {
        Major::from_number(self.version.major)
            .expect("refusals are answered in an advertised major")
    }

    /// The error answer.
    pub fn problem(&self) -> Problem {
        let listed = self
            .advertised
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>();
        match &self.reason {
            RefusalReason::Unsupported => Problem::new(
                Code::ProtocolVersionUnsupported,
                format!(
                    "OpenWOP-Version names no version this host serves: send one of {}",
                    listed.join(", ")
                ),
            )
            .with_detail("protocolVersions", listed),
            RefusalReason::Mismatch => Problem::new(
                Code::ProtocolVersionMismatch,
                "a /v1/ path is served in major 1 only: send OpenWOP-Version: 1 or none, or use the unversioned path",
            ),
            RefusalReason::NotServed(m) => Problem::new(
                Code::NotFound,
                format!(
                    "this host does not serve major {m} (protocolVersions: {})",
                    listed.join(", ")
                ),
            ),
        }
    }
}

/// Decides the major a request is served in. `header` is the raw `OpenWOP-Version` value;
/// pass repeated headers joined by `", "` (which is no version, and refused as such).
pub fn negotiate(
    path: PathClass,
    header: Option<&[u8]>,
    host: &Advertised,
) -> Result<Negotiated, Refusal> {
    let vary = path.varies_on_version();
    let default = match path {
        PathClass::V1 => Major::V1,
        PathClass::Discovery => host.preferred,
        PathClass::Unversioned => Major::V2,
    };
    let refuse = |reason: RefusalReason| Refusal {
        reason,
        // An unadvertised default is answered in the preferred major: the only contract the
        // host is sure to speak.
        version: host.version_of(default).unwrap_or_else(|| host.preferred()),
        vary,
        advertised: host.protocol_versions(),
    };
    let requested = header.map(RequestedVersion::parse);
    let served = match (path, requested) {
        (PathClass::V1, Some(Some(r))) if r.major == 1 => host.version_of(Major::V1),
        (PathClass::V1, Some(_)) => return Err(refuse(RefusalReason::Mismatch)),
        (_, Some(Some(r))) => match host.select(r) {
            Some(v) => Some(v),
            None => return Err(refuse(RefusalReason::Unsupported)),
        },
        (_, Some(None)) => return Err(refuse(RefusalReason::Unsupported)),
        (_, None) => host.version_of(default),
    };
    match served {
        Some(version) => Ok(Negotiated { version, vary }),
        None => Err(refuse(RefusalReason::NotServed(default))),
    }
}

/// `OpenWOP-Client-Version`: the version the client implements. Never selects a contract and
/// never fails a request: a value outside the `<major>.<minor>` grammar is treated as absent.
pub fn client_version(value: Option<&[u8]>) -> Option<ProtocolVersion> {
    let s = std::str::from_utf8(value?).ok()?.trim_matches([' ', '\t']);
    s.parse().ok()
}

/// Whether a host with `minClientVersion` `min` may refuse a client announcing `client`
/// (`426 client_version_unsupported`, a MAY): only a client that says it is older. A client
/// that says nothing is not refused.
pub fn below_minimum(client: Option<ProtocolVersion>, min: Option<ProtocolVersion>) -> bool {
    matches!((client, min), (Some(c), Some(m)) if c < m)
}

/// The 426 answer to a client [`below_minimum`].
pub fn client_too_old(client: ProtocolVersion, min: ProtocolVersion) -> Problem {
    Problem::new(
        Code::ClientVersionUnsupported,
        format!(
            "this host needs a client implementing {min} or later; the client announced {client}"
        ),
    )
    .with_detail("minClientVersion", min.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v2::version::Major;
    use proptest::prelude::*;
    use serde_json::json;

    fn v(s: &str) -> ProtocolVersion {
        s.parse().unwrap()
    }

    /// The overlap: both majors, v1 preferred.
    fn overlap() -> Advertised {
        Advertised::new(&[v("1.0"), v("2.0")], v("1.0")).unwrap()
    }

    fn v2_only() -> Advertised {
        Advertised::new(&[v("2.3")], v("2.3")).unwrap()
    }

    fn v1_only() -> Advertised {
        Advertised::new(&[v("1.0")], v("1.0")).unwrap()
    }

    #[test]
    fn request_values_name_a_major_and_maybe_a_minor() {
        for (raw, want) in [
            ("2", Some((2, None))),
            ("2.0", Some((2, Some(0)))),
            ("1", Some((1, None))),
            ("1.3", Some((1, Some(3)))),
            (" 2 ", Some((2, None))),
            ("0", Some((0, None))),
            ("", None),
            ("v2", None),
            ("2.x", None),
            ("02", None),
            ("2.0.0", None),
            ("2, 1", None),
            ("-1", None),
            ("99999999999", None),
        ] {
            let got = RequestedVersion::parse(raw.as_bytes()).map(|r| (r.major, r.minor));
            assert_eq!(got, want, "{raw:?}");
        }
        assert_eq!(RequestedVersion::parse(&[0xff, b'2']), None);
    }

    #[test]
    fn paths_are_classified_on_segment_boundaries() {
        for (p, want) in [
            ("/v1", PathClass::V1),
            ("/v1/runs", PathClass::V1),
            ("/v1/runs/abc/events", PathClass::V1),
            ("/v10/runs", PathClass::Unversioned),
            ("/v1runs", PathClass::Unversioned),
            ("/.well-known/openwop", PathClass::Discovery),
            ("/.well-known/openwop/x", PathClass::Unversioned),
            ("/runs", PathClass::Unversioned),
            ("/v2/runs", PathClass::Unversioned),
            ("/", PathClass::Unversioned),
        ] {
            assert_eq!(PathClass::of(p), want, "{p}");
        }
    }

    /// The decision table, under the overlap advertisement.
    #[test]
    fn the_overlap_decision_table() {
        use RefusalReason::*;
        let host = overlap();
        // (path, header, served version and Vary | refusal and the version answering it)
        type Case = (
            &'static str,
            Option<&'static str>,
            Result<(&'static str, bool), (RefusalReason, &'static str)>,
        );
        let cases: [Case; 17] = [
            // Header-less: discovery by preferredVersion, every other unversioned path v2.
            ("/.well-known/openwop", None, Ok(("1.0", true))),
            ("/runs/acme~2Fr1", None, Ok(("2.0", true))),
            ("/v1/runs", None, Ok(("1.0", false))),
            // An advertised major, in either spelling.
            ("/.well-known/openwop", Some("2"), Ok(("2.0", true))),
            ("/.well-known/openwop", Some("2.0"), Ok(("2.0", true))),
            ("/runs", Some("2.7"), Ok(("2.0", true))),
            ("/runs", Some("1"), Ok(("1.0", true))),
            ("/v1/runs", Some("1"), Ok(("1.0", false))),
            ("/v1/runs", Some("1.3"), Ok(("1.0", false))),
            // Unadvertised or not a version: 406 on unversioned paths.
            ("/runs", Some("3"), Err((Unsupported, "2.0"))),
            ("/runs", Some("0.9"), Err((Unsupported, "2.0"))),
            (
                "/.well-known/openwop",
                Some("3.0"),
                Err((Unsupported, "1.0")),
            ),
            ("/runs", Some("two"), Err((Unsupported, "2.0"))),
            ("/runs", Some(""), Err((Unsupported, "2.0"))),
            // A /v1/ path with anything but major 1: 400.
            ("/v1/runs", Some("2"), Err((Mismatch, "1.0"))),
            ("/v1/runs", Some("3"), Err((Mismatch, "1.0"))),
            ("/v1/runs", Some("one"), Err((Mismatch, "1.0"))),
        ];
        for (path, header, want) in cases {
            let got = negotiate(PathClass::of(path), header.map(str::as_bytes), &host);
            match (got, want) {
                (Ok(n), Ok((version, vary))) => {
                    assert_eq!(
                        (n.header_value().as_str(), n.vary),
                        (version, vary),
                        "{path} {header:?}"
                    );
                }
                (Err(r), Err((reason, version))) => {
                    assert_eq!(
                        (r.reason, r.version),
                        (reason, v(version)),
                        "{path} {header:?}"
                    );
                }
                (got, want) => panic!("{path} {header:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn after_v1_retires_v1_paths_are_not_served() {
        let host = v2_only();
        let r = negotiate(PathClass::V1, None, &host).unwrap_err();
        assert_eq!(r.reason, RefusalReason::NotServed(Major::V1));
        assert_eq!(r.problem().code(), Code::NotFound);
        // Header-less discovery now answers the v2 root.
        let n = negotiate(PathClass::Discovery, None, &host).unwrap();
        assert_eq!((n.major(), n.header_value().as_str()), (Major::V2, "2.3"));
        // Asking for v1 is asking for an unadvertised major.
        let r = negotiate(PathClass::Unversioned, Some(b"1"), &host).unwrap_err();
        assert_eq!(r.reason, RefusalReason::Unsupported);
    }

    #[test]
    fn a_v1_only_host_serves_no_unversioned_operation_by_default() {
        let host = v1_only();
        let r = negotiate(PathClass::Unversioned, None, &host).unwrap_err();
        assert_eq!(r.reason, RefusalReason::NotServed(Major::V2));
        // Answered under the contract the host speaks.
        assert_eq!(r.version, v("1.0"));
        assert_eq!(
            negotiate(PathClass::Discovery, None, &host)
                .unwrap()
                .version,
            v("1.0")
        );
    }

    #[test]
    fn a_406_echoes_the_advertised_list() {
        let r = negotiate(PathClass::Unversioned, Some(b"9"), &overlap()).unwrap_err();
        let out = r.problem().render(r.major());
        assert_eq!(out.status, 406);
        assert_eq!(out.body.error, "protocol_version_unsupported");
        assert_eq!(
            serde_json::Value::Object(out.body.details.unwrap()),
            json!({"protocolVersions": ["1.0", "2.0"]})
        );
        let r = negotiate(PathClass::V1, Some(b"2"), &overlap()).unwrap_err();
        let out = r.problem().render(r.major());
        assert_eq!(
            (out.status, out.body.error.as_str()),
            (400, "protocol_version_mismatch")
        );
    }

    #[test]
    fn advertisements_follow_the_overlap_rules() {
        use AdvertisedError::*;
        for (versions, preferred, want) in [
            (&["1.0", "2.0"][..], "1.0", Ok(())),
            (&["2.0", "1.2"][..], "1.2", Ok(())),
            (&["2.0"][..], "2.0", Ok(())),
            (&["1.0"][..], "1.0", Ok(())),
            (&[][..], "1.0", Err(Empty)),
            (
                &["1.0", "2.0"][..],
                "2.0",
                Err(PreferredNotV1DuringOverlap(v("2.0"))),
            ),
            (&["2.0"][..], "2.1", Err(PreferredNotListed(v("2.1")))),
            (&["1.0", "1.1"][..], "1.0", Err(DuplicateMajor(1))),
            (&["3.0"][..], "3.0", Err(UnknownMajor(v("3.0")))),
        ] {
            let versions: Vec<_> = versions.iter().map(|s| v(s)).collect();
            let got = Advertised::new(&versions, v(preferred)).map(|_| ());
            assert_eq!(got, want, "{versions:?} {preferred}");
        }
        assert_eq!(
            Advertised::new(&[v("2.0"), v("1.2")], v("1.2"))
                .unwrap()
                .protocol_versions(),
            [v("1.2"), v("2.0")]
        );
    }

    #[test]
    fn client_versions_never_fail_and_compare_on_major_minor() {
        for (raw, want) in [
            (Some("2.1"), Some("2.1")),
            (Some(" 1.0 "), Some("1.0")),
            (Some("2"), None),
            (Some("latest"), None),
            (Some(""), None),
            (None, None),
        ] {
            assert_eq!(
                client_version(raw.map(str::as_bytes)),
                want.map(v),
                "{raw:?}"
            );
        }
        assert_eq!(client_version(Some(&[0xc3, 0x28])), None);
        assert!(below_minimum(Some(v("2.0")), Some(v("2.1"))));
        assert!(below_minimum(Some(v("1.9")), Some(v("2.0"))));
        assert!(!below_minimum(Some(v("2.1")), Some(v("2.1"))));
        assert!(!below_minimum(None, Some(v("2.1"))));
        assert!(!below_minimum(Some(v("1.0")), None));
        let p = client_too_old(v("2.0"), v("2.1")).render(Major::V2);
        assert_eq!(
            (p.status, p.body.error.as_str()),
            (426, "client_version_unsupported")
        );
    }

    proptest! {
        /// Whatever the header, a served request is in an advertised major, the response
        /// names exactly the advertised version of that major, and an unversioned answer
        /// varies on the header.
        #[test]
        fn negotiation_never_invents_a_version(
            header in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
            path in prop_oneof![Just("/v1/runs"), Just("/runs"), Just("/.well-known/openwop")],
        ) {
            let host = overlap();
            let class = PathClass::of(path);
            match negotiate(class, header.as_deref(), &host) {
                Ok(n) => {
                    prop_assert_eq!(host.version_of(n.major()), Some(n.version));
                    prop_assert_eq!(n.vary, class != PathClass::V1);
                }
                Err(r) => prop_assert!(host.protocol_versions().contains(&r.version)),
            }
        }

        /// Only the major selects: every minor of an advertised major is served the same.
        #[test]
        fn the_minor_is_informational(minor in any::<u32>()) {
            let host = overlap();
            let header = format!("2.{minor}");
            let n = negotiate(PathClass::Unversioned, Some(header.as_bytes()), &host).unwrap();
            prop_assert_eq!(n.version, v("2.0"));
        }
    }

    #[test]
    fn only_manifest_paths_are_protocol_operations() {
        for (path, class) in [
            ("/v1/runs", Some(PathClass::V1)),
            ("/.well-known/openwop", Some(PathClass::Discovery)),
            ("/runs", Some(PathClass::Unversioned)),
            ("/runs/r1/events", Some(PathClass::Unversioned)),
            ("/runs:bulk-cancel", Some(PathClass::Unversioned)),
            ("/openapi.json", Some(PathClass::Unversioned)),
            ("/interrupts/tok", Some(PathClass::Unversioned)),
            ("/ui/runs/r1", None),
            ("/metrics", None),
            ("/healthz", None),
            ("/schemas/envelopes/x.json", None),
            ("/runsx", None),
            ("/", None),
        ] {
            assert_eq!(PathClass::of_protocol(path), class, "{path}");
        }
    }
}
