//! Tenant-bound ids (`identity.md` §5, RFC 0184): `<tenant>/<opaque>` for `runId`,
//! `interruptId`, `subscriptionId`, `deliveryId` and `effectId`.
//!
//! * In documents and bodies an id is always bound, `tenant/opaque` ([`TenantBoundId`]'s
//!   `Display` and serde form).
//! * In a path it is one segment, projected once where it leaves the host: every byte outside
//!   `[A-Za-z0-9._-]` becomes `~` and two uppercase hex digits, so `acme/r…` is `acme~2Fr…`
//!   ([`TenantBoundId::path_segment`]). On input `~2F` and `%2F` are both accepted, decoded
//!   once before the grammar is matched ([`PathId::parse`]).
//! * Through the overlap a path may carry the bare opaque segment a `/v1/` create handed out;
//!   it is bound to the caller's tenant, never another's ([`PathId::bind`]). Once no 1.x is
//!   advertised the bare form is a `400 validation_error`.
//! * A bound id naming another tenant is refused; the REST answers `403 id_tenant_mismatch`.
//!
//! In this host the tenant is the Kubernetes namespace and a run's opaque segment is its
//! `runId` (the Run's uid), so a v1 id is already a valid opaque segment.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::errors::{Code, Problem};
use super::negotiate::Advertised;
use super::version::Major;

/// Longest tenant segment and longest opaque segment, in characters.
pub const MAX_SEGMENT: usize = 128;
/// Shortest opaque segment.
pub const MIN_OPAQUE: usize = 16;
/// The prefix of an anonymous surface's tenant segment (RFC 0132).
pub const ANON_PREFIX: &str = "anon:";
/// Random bytes in a minted opaque segment: 128 bits.
pub const MINT_BYTES: usize = 16;

/// The id alphabet `[A-Za-z0-9._~-]`.
fn id_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-')
}

/// The bytes a path segment carries as they are; every other byte is `~HH`.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// Why an id is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{0}")]
    Malformed(String),
    #[error("the id's tenant segment '{id_tenant}' is not the caller's tenant")]
    TenantMismatch { id_tenant: String },
    #[error(
        "a bare id (no tenant segment) is no longer accepted: send <tenant>/<id>, projected as <tenant>~2F<id>"
    )]
    BareRefused,
}

impl IdError {
    /// The error answer: `403 id_tenant_mismatch` for another tenant's id, else
    /// `400 validation_error`.
    pub fn problem(&self) -> Problem {
        let code = match self {
            IdError::TenantMismatch { .. } => Code::IdTenantMismatch,
            IdError::Malformed(_) | IdError::BareRefused => Code::ValidationError,
        };
        Problem::new(code, self.to_string())
    }
}

fn malformed(what: &str, value: &str, rule: &str) -> IdError {
    IdError::Malformed(format!("{what} {value:?} is not valid: {rule}"))
}

/// A tenant segment: `(anon:)?[A-Za-z0-9._~-]{1,128}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tenant(String);

impl Tenant {
    pub fn parse(s: &str) -> Result<Tenant, IdError> {
        let name = s.strip_prefix(ANON_PREFIX).unwrap_or(s);
        if (1..=MAX_SEGMENT).contains(&name.len()) && name.bytes().all(id_char) {
            Ok(Tenant(s.to_owned()))
        } else {
            Err(malformed(
                "tenant",
                s,
                "use 1 to 128 letters, digits, '.', '_', '~' or '-' (optionally after 'anon:')",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A tenant of an anonymous public surface.
    pub fn is_anonymous(&self) -> bool {
        self.0.starts_with(ANON_PREFIX)
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An opaque segment: `[A-Za-z0-9._~-]{16,128}`. Ids minted before the `~` rule may carry
/// `~` and still resolve; [`OpaqueId::mint`] never produces one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpaqueId(String);

impl OpaqueId {
    pub fn parse(s: &str) -> Result<OpaqueId, IdError> {
        if (MIN_OPAQUE..=MAX_SEGMENT).contains(&s.len()) && s.bytes().all(id_char) {
            Ok(OpaqueId(s.to_owned()))
        } else {
            Err(malformed(
                "id",
                s,
                "use 16 to 128 letters, digits, '.', '_', '~' or '-'",
            ))
        }
    }

    /// A new opaque segment from 128 random bits the caller draws (this crate does no I/O):
    /// 22 characters of `[A-Za-z0-9_-]`, never `~`. Distinct bits give distinct ids.
    pub fn mint(random: [u8; MINT_BYTES]) -> OpaqueId {
        OpaqueId(URL_SAFE_NO_PAD.encode(random))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OpaqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `<tenant>/<opaque>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantBoundId {
    tenant: Tenant,
    opaque: OpaqueId,
}

impl TenantBoundId {
    pub fn new(tenant: Tenant, opaque: OpaqueId) -> Self {
        TenantBoundId { tenant, opaque }
    }

    /// The body form, `tenant/opaque`.
    pub fn parse(s: &str) -> Result<TenantBoundId, IdError> {
        let (tenant, opaque) = s
            .split_once('/')
            .ok_or_else(|| malformed("tenant-bound id", s, "use <tenant>/<id>"))?;
        Ok(TenantBoundId {
            tenant: Tenant::parse(tenant)?,
            opaque: OpaqueId::parse(opaque)?,
        })
    }

    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    pub fn opaque(&self) -> &OpaqueId {
        &self.opaque
    }

    /// The id as one path segment, for every link the host emits: projected here, once.
    pub fn path_segment(&self) -> String {
        let mut out = String::with_capacity(self.tenant.0.len() + self.opaque.0.len() + 8);
        for b in self
            .tenant
            .0
            .bytes()
            .chain([b'/'])
            .chain(self.opaque.0.bytes())
        {
            if unreserved(b) {
                out.push(char::from(b));
            } else {
                out.push('~');
                out.push_str(&format!("{b:02X}"));
            }
        }
        out
    }
}

impl fmt::Display for TenantBoundId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.opaque)
    }
}

impl Serialize for TenantBoundId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TenantBoundId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        TenantBoundId::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Whether a bare opaque segment is accepted on a major-2 path parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BareForm {
    /// Through the overlap: bound to the caller's tenant.
    Admitted,
    /// Once no 1.x version is advertised.
    Refused,
}

impl BareForm {
    /// The rule for a host advertising `host`.
    pub fn during(host: &Advertised) -> BareForm {
        if host.serves(Major::V1) {
            BareForm::Admitted
        } else {
            BareForm::Refused
        }
    }
}

/// A tenant-bound path parameter as the request sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathId {
    Bound(TenantBoundId),
    /// The opaque segment alone (what a `/v1/` create hands out).
    Bare(OpaqueId),
}

impl PathId {
    /// Decodes a path parameter (`~HH` and `%HH`, once) and matches the grammar. Accepts the
    /// raw segment or one a router has already percent-decoded: a literal `/` is the
    /// separator either way, and `%` is no id character, so decoding it cannot change a
    /// valid id.
    pub fn parse(param: &str) -> Result<PathId, IdError> {
        let decoded = decode(param)?;
        match decoded.split_once('/') {
            Some(_) => TenantBoundId::parse(&decoded).map(PathId::Bound),
            None => OpaqueId::parse(&decoded).map(PathId::Bare),
        }
    }

    /// The id the request names, for a caller in `caller`: a bare id is bound to it (when
    /// admitted); a bound id must name it.
    pub fn bind(self, caller: &Tenant, bare: BareForm) -> Result<TenantBoundId, IdError> {
        match (self, bare) {
            (PathId::Bound(id), _) if &id.tenant == caller => Ok(id),
            (PathId::Bound(id), _) => Err(IdError::TenantMismatch {
                id_tenant: id.tenant.0,
            }),
            (PathId::Bare(opaque), BareForm::Admitted) => {
                Ok(TenantBoundId::new(caller.clone(), opaque))
            }
            (PathId::Bare(_), BareForm::Refused) => Err(IdError::BareRefused),
        }
    }
}

/// One pass of `~HH` / `%HH` decoding; the result is never decoded again.
fn decode(param: &str) -> Result<String, IdError> {
    let bytes = param.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'~' | b'%' => {
                let escaped = match bytes.get(i + 1..i + 3) {
                    Some(&[hi, lo]) => hex(hi).zip(hex(lo)).map(|(hi, lo)| hi << 4 | lo),
                    _ => None,
                };
                let Some(b) = escaped else {
                    return Err(malformed(
                        "path id",
                        param,
                        "'~' and '%' must be followed by two hex digits (e.g. tenant~2Fid)",
                    ));
                };
                out.push(b);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| malformed("path id", param, "it does not decode to UTF-8"))
}

fn hex(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v2::version::ProtocolVersion;
    use proptest::prelude::*;

    const RUN: &str = "6f1c2a9e-0b7d-4c1e-9a53-2b8f4d1e7c60";

    fn acme() -> Tenant {
        Tenant::parse("acme").unwrap()
    }

    #[test]
    fn segments_follow_the_grammars() {
        for (s, ok) in [
            ("acme", true),
            ("team-a.prod_1~x", true),
            ("anon:acme", true),
            ("", false),
            ("anon:", false),
            ("ac/me", false),
            ("ac me", false),
            ("acmé", false),
            (&"t".repeat(128), true),
            (&"t".repeat(129), false),
        ] {
            assert_eq!(Tenant::parse(s).is_ok(), ok, "tenant {s:?}");
        }
        for (s, ok) in [
            (RUN, true),
            ("wh_0123456789abcdef01234567", true),
            ("abc~def.ghi_jk-l", true),
            ("short", false),
            (&"o".repeat(15), false),
            (&"o".repeat(16), true),
            (&"o".repeat(128), true),
            (&"o".repeat(129), false),
            ("has/slash-0123456789", false),
            ("has:colon-0123456789", false),
        ] {
            assert_eq!(OpaqueId::parse(s).is_ok(), ok, "opaque {s:?}");
        }
    }

    #[test]
    fn a_bound_id_is_projected_once_into_one_segment() {
        let id = TenantBoundId::new(acme(), OpaqueId::parse(RUN).unwrap());
        assert_eq!(id.to_string(), format!("acme/{RUN}"));
        assert_eq!(id.path_segment(), format!("acme~2F{RUN}"));
        // `~` and `:` are projected too, so the segment decodes back unambiguously.
        let odd = TenantBoundId::parse("anon:acme/old~2Fid-0123456789").unwrap();
        assert_eq!(odd.path_segment(), "anon~3Aacme~2Fold~7E2Fid-0123456789");
        assert_eq!(PathId::parse(&odd.path_segment()), Ok(PathId::Bound(odd)));
    }

    #[test]
    fn path_parameters_accept_tilde_percent_and_decoded_forms() {
        let want = PathId::Bound(TenantBoundId::parse(&format!("acme/{RUN}")).unwrap());
        for p in [
            format!("acme~2F{RUN}"),
            format!("acme~2f{RUN}"),
            format!("acme%2F{RUN}"),
            format!("acme%2f{RUN}"),
            format!("acme/{RUN}"),
        ] {
            assert_eq!(PathId::parse(&p), Ok(want.clone()), "{p}");
        }
        assert_eq!(
            PathId::parse(RUN),
            Ok(PathId::Bare(OpaqueId::parse(RUN).unwrap()))
        );
        // One pass: `~7E2F` is a literal `~2F` in an old id, not a second separator.
        assert_eq!(
            PathId::parse("acme~2Fold~7E2Fid-0123456789"),
            Ok(PathId::Bound(
                TenantBoundId::parse("acme/old~2Fid-0123456789").unwrap()
            ))
        );
        for bad in [
            "acme~2",
            "acme~zz0123456789abcdef",
            "acme%2",
            "acme~2Facme~2F0123456789abcdef",
            "acme~2Fshort",
            "~2F0123456789abcdef",
            "acme~FF0123456789abcdef",
            "",
        ] {
            let e = PathId::parse(bad).unwrap_err();
            assert_eq!(e.problem().code(), Code::ValidationError, "{bad}");
        }
    }

    #[test]
    fn binding_checks_the_tenant_and_the_overlap() {
        let ours = PathId::parse(&format!("acme~2F{RUN}")).unwrap();
        assert_eq!(
            ours.clone()
                .bind(&acme(), BareForm::Refused)
                .unwrap()
                .to_string(),
            format!("acme/{RUN}")
        );
        let theirs = PathId::parse(&format!("globex~2F{RUN}")).unwrap();
        let e = theirs.bind(&acme(), BareForm::Admitted).unwrap_err();
        let r = e.problem().render(Major::V2);
        assert_eq!(
            (r.status, r.body.error.as_str()),
            (403, "id_tenant_mismatch")
        );

        let bare = PathId::parse(RUN).unwrap();
        assert_eq!(
            bare.clone().bind(&acme(), BareForm::Admitted).unwrap(),
            TenantBoundId::new(acme(), OpaqueId::parse(RUN).unwrap())
        );
        let e = bare.bind(&acme(), BareForm::Refused).unwrap_err();
        assert_eq!(e, IdError::BareRefused);
        assert_eq!(e.problem().render(Major::V2).status, 400);
    }

    #[test]
    fn the_bare_form_lives_as_long_as_v1_is_advertised() {
        let v = |s: &str| s.parse::<ProtocolVersion>().unwrap();
        let overlap = Advertised::new(&[v("1.0"), v("2.0")], v("1.0")).unwrap();
        let after = Advertised::new(&[v("2.0")], v("2.0")).unwrap();
        assert_eq!(BareForm::during(&overlap), BareForm::Admitted);
        assert_eq!(BareForm::during(&after), BareForm::Refused);
    }

    #[test]
    fn ids_serialize_bound_in_bodies() {
        let id = TenantBoundId::new(acme(), OpaqueId::parse(RUN).unwrap());
        let v = serde_json::to_value(&id).unwrap();
        assert_eq!(v, serde_json::json!(format!("acme/{RUN}")));
        assert_eq!(serde_json::from_value::<TenantBoundId>(v).unwrap(), id);
        assert!(serde_json::from_value::<TenantBoundId>(serde_json::json!(RUN)).is_err());
    }

    proptest! {
        #[test]
        fn minted_ids_are_valid_new_ids(bytes in any::<[u8; MINT_BYTES]>()) {
            let id = OpaqueId::mint(bytes);
            prop_assert_eq!(OpaqueId::parse(id.as_str()), Ok(id.clone()));
            prop_assert!(!id.as_str().contains('~'));
            prop_assert_eq!(id.as_str().len(), 22);
        }

        #[test]
        fn minting_is_injective(a in any::<[u8; MINT_BYTES]>(), b in any::<[u8; MINT_BYTES]>()) {
            prop_assert_eq!(a == b, OpaqueId::mint(a) == OpaqueId::mint(b));
        }

        /// Every valid id survives projection and decoding, and its segment is one segment
        /// of unreserved characters and `~HH` escapes only.
        #[test]
        fn projection_round_trips(
            anon in any::<bool>(),
            tenant in "[A-Za-z0-9._~-]{1,128}",
            opaque in "[A-Za-z0-9._~-]{16,128}",
        ) {
            let tenant = if anon { format!("anon:{tenant}") } else { tenant };
            let id = TenantBoundId::new(Tenant::parse(&tenant).unwrap(), OpaqueId::parse(&opaque).unwrap());
            let seg = id.path_segment();
            prop_assert!(seg.bytes().all(|b| unreserved(b) || b == b'~'));
            prop_assert_eq!(PathId::parse(&seg), Ok(PathId::Bound(id)));
        }
    }
}
