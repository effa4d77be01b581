//! The egress guard: which network targets a workflow may reach from this host.
//!
//! One policy for every outbound call a user can aim: the HTTP call node (`httpClient` /
//! `safeFetch`, `ssrfGuard: true` in discovery) and webhook subscriptions. Without it, a
//! workflow author could make the worker (which runs inside the cluster network) read the
//! cloud metadata service, the kube-apiserver or any in-cluster Service.
//!
//! Pure: the caller resolves the name (DNS is I/O) and asks [`EgressPolicy::check_resolved`]
//! which address to connect to, then connects to exactly that address (pinning), so a name
//! that resolves to a public address at check time and a private one at connect time (DNS
//! rebinding) cannot slip through. Every resolved address must be allowed, not just one: a
//! name with one public and one private record is refused, because the client would otherwise
//! be free to pick either.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use url::{Host, Url};

/// Request headers the HTTP client owns, which no user-given header may set (compared
/// without case): framing and the connection (`Connection: upgrade` would turn a call into a
/// tunnel past this guard). The HTTP call node refuses them; a ToolServer's headers refuse
/// them and the MCP client's own (`protocol::tools::mcp`).
pub const CLIENT_OWNED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
];

/// Names that reach the host itself or cloud metadata services whatever DNS says.
const INTERNAL_NAMES: &[&str] = &[
    "localhost",
    "metadata",
    "metadata.google.internal",
    "instance-data",
    "kubernetes",
    "kubernetes.default",
];
/// Suffixes of names that are internal by construction (mDNS, cluster DNS, cloud-internal).
const INTERNAL_SUFFIXES: &[&str] = &[
    ".localhost",
    ".local",
    ".internal",
    ".svc",
    ".cluster.local",
];

/// A range no outbound call may reach unless the policy allows the host explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockedRange {
    Unspecified,
    Loopback,
    /// RFC 1918 (IPv4).
    Private,
    /// RFC 6598 carrier-grade NAT, 100.64.0.0/10 (also used for pod networks).
    SharedAddressSpace,
    /// 169.254.0.0/16 and fe80::/10 — the cloud metadata service lives here.
    LinkLocal,
    /// fc00::/7.
    UniqueLocal,
    Multicast,
    Broadcast,
    /// 0.0.0.0/8, 240.0.0.0/4, documentation and benchmarking ranges.
    Reserved,
}

impl BlockedRange {
    pub fn as_str(self) -> &'static str {
        match self {
            BlockedRange::Unspecified => "unspecified",
            BlockedRange::Loopback => "loopback",
            BlockedRange::Private => "private (RFC 1918)",
            BlockedRange::SharedAddressSpace => "shared address space (RFC 6598)",
            BlockedRange::LinkLocal => "link-local (cloud metadata)",
            BlockedRange::UniqueLocal => "unique local (fc00::/7)",
            BlockedRange::Multicast => "multicast",
            BlockedRange::Broadcast => "broadcast",
            BlockedRange::Reserved => "reserved",
        }
    }
}

impl std::fmt::Display for BlockedRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The range `ip` belongs to when an outbound call must not reach it; `None` for a public
/// address. IPv6 forms that embed an IPv4 address (mapped, 6to4, NAT64) are judged by the
/// embedded address, so `::ffff:127.0.0.1` is loopback.
pub fn blocked_range(ip: IpAddr) -> Option<BlockedRange> {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => blocked_v6(v6),
    }
}

fn blocked_v4(ip: Ipv4Addr) -> Option<BlockedRange> {
    let [a, b, c, _] = ip.octets();
    if ip.is_unspecified() {
        Some(BlockedRange::Unspecified)
    } else if ip.is_loopback() {
        Some(BlockedRange::Loopback)
    } else if ip.is_private() {
        Some(BlockedRange::Private)
    } else if a == 100 && (64..128).contains(&b) {
        Some(BlockedRange::SharedAddressSpace)
    } else if ip.is_link_local() {
        Some(BlockedRange::LinkLocal)
    } else if ip.is_multicast() {
        Some(BlockedRange::Multicast)
    } else if ip.is_broadcast() {
        Some(BlockedRange::Broadcast)
    } else if a == 0
        || a >= 240
        || (a == 192 && b == 0 && c == 0)
        || ip.is_documentation()
        || (a == 198 && (18..20).contains(&b))
    {
        Some(BlockedRange::Reserved)
    } else {
        None
    }
}

fn blocked_v6(ip: Ipv6Addr) -> Option<BlockedRange> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return blocked_v4(v4);
    }
    let seg = ip.segments();
    let embedded =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if seg[0] == 0x2002 {
        // 6to4: 2002:AABB:CCDD::/48 carries AA.BB.CC.DD.
        return blocked_v4(embedded(seg[1], seg[2]));
    }
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        // NAT64 well-known prefix 64:ff9b::/96.
        return blocked_v4(embedded(seg[6], seg[7]));
    }
    if ip.is_unspecified() {
        Some(BlockedRange::Unspecified)
    } else if ip.is_loopback() {
        Some(BlockedRange::Loopback)
    } else if seg[0] & 0xffc0 == 0xfe80 {
        Some(BlockedRange::LinkLocal)
    } else if seg[0] & 0xfe00 == 0xfc00 {
        Some(BlockedRange::UniqueLocal)
    } else if ip.is_multicast() {
        Some(BlockedRange::Multicast)
    } else if seg[0] == 0x2001 && seg[1] == 0x0db8 || seg[..6] == [0; 6] {
        // Documentation, and the deprecated IPv4-compatible ::a.b.c.d.
        Some(BlockedRange::Reserved)
    } else {
        None
    }
}

/// Why a target was refused. `Display` says what, where and what to do; the caller picks the
/// wire code (`http_url_rejected` for the HTTP node, `webhook_url_rejected` for webhooks).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressRefusal {
    #[error("`{url}` is not an absolute URL ({reason})")]
    Malformed { url: String, reason: String },
    #[error("scheme `{scheme}` is not allowed here; use {allowed}")]
    Scheme {
        scheme: String,
        allowed: &'static str,
    },
    #[error(
        "the URL carries a user name or password; send credentials in a header taken from a Secret"
    )]
    Credentials,
    #[error(
        "host `{host}` is internal ({why}); a platform admin can allow it in the chart's egress allow list"
    )]
    InternalName { host: String, why: &'static str },
    #[error(
        "host `{host}` is (or resolves to) {ip}, a {range} address; a platform admin can allow the host in the chart's egress allow list"
    )]
    Address {
        host: String,
        ip: IpAddr,
        range: BlockedRange,
    },
    #[error("host `{host}` resolved to no address")]
    Unresolved { host: String },
}

/// One entry of the allow list: an exact host name, `*.suffix`, an address or a CIDR block.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Allowed {
    Name(String),
    Suffix(String),
    Net(IpNet),
}

/// What a target may be. Built from the chart's settings; [`EgressPolicy::default`] is the
/// strict policy (http and https, nothing internal).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    allowed: Vec<Allowed>,
    https_only: bool,
}

/// A syntactically acceptable target: what to resolve and where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub url: Url,
    /// The host as written (lower case), without IPv6 brackets.
    pub host: String,
    pub port: u16,
    /// Set when the URL names an address rather than a host name (nothing to resolve).
    pub literal: Option<IpAddr>,
    /// The host is on the allow list: its addresses are not range-checked.
    pub allowed: bool,
}

/// An allow-list entry that is not a host name, `*.suffix`, address or CIDR block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "egress allow list entry `{0}` is not a host name, `*.suffix`, IP address or CIDR block (e.g. `api.example.com`, `*.corp.example`, `10.1.2.3`, `10.0.0.0/8`)"
)]
pub struct BadAllowEntry(pub String);

impl EgressPolicy {
    /// A policy that also reaches the listed hosts, addresses and blocks.
    pub fn allowing<I, S>(entries: I) -> Result<Self, BadAllowEntry>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut allowed = Vec::new();
        for raw in entries {
            let entry = raw.as_ref().trim().to_ascii_lowercase();
            let parsed = if let Ok(net) = entry.parse::<IpNet>() {
                Allowed::Net(net)
            } else if let Ok(ip) = entry.parse::<IpAddr>() {
                Allowed::Net(IpNet::from(ip))
            } else if let Some(suffix) = entry.strip_prefix("*.") {
                if !is_host_name(suffix) {
                    return Err(BadAllowEntry(raw.as_ref().to_owned()));
                }
                Allowed::Suffix(format!(".{suffix}"))
            } else if is_host_name(&entry) {
                Allowed::Name(entry)
            } else {
                return Err(BadAllowEntry(raw.as_ref().to_owned()));
            };
            allowed.push(parsed);
        }
        Ok(EgressPolicy {
            allowed,
            https_only: false,
        })
    }

    /// Only `https` targets (webhook subscriptions: the spec requires TLS).
    pub fn https_only(mut self) -> Self {
        self.https_only = true;
        self
    }

    fn name_allowed(&self, host: &str) -> bool {
        self.allowed.iter().any(|a| match a {
            Allowed::Name(n) => n == host,
            Allowed::Suffix(s) => host.ends_with(s.as_str()),
            Allowed::Net(_) => false,
        })
    }

    fn address_allowed(&self, ip: IpAddr) -> bool {
        self.allowed
            .iter()
            .any(|a| matches!(a, Allowed::Net(net) if net.contains(&ip)))
    }

    /// Checks what can be checked before DNS: syntax, scheme, credentials, internal names and
    /// literal addresses. The URL parser normalises obfuscated IPv4 forms (`2130706433`,
    /// `0x7f.1`) to dotted quads first, so they are judged as the address they are.
    pub fn check_url(&self, raw: &str) -> Result<Target, EgressRefusal> {
        let url = Url::parse(raw.trim()).map_err(|e| EgressRefusal::Malformed {
            url: raw.to_owned(),
            reason: e.to_string(),
        })?;
        let allowed_schemes = if self.https_only {
            "https"
        } else {
            "http or https"
        };
        match url.scheme() {
            "https" => {}
            "http" if !self.https_only => {}
            other => {
                return Err(EgressRefusal::Scheme {
                    scheme: other.to_owned(),
                    allowed: allowed_schemes,
                });
            }
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(EgressRefusal::Credentials);
        }
        let port = url.port_or_known_default().unwrap_or(443);
        let (host, literal) = match url.host() {
            Some(Host::Domain(d)) => (d.trim_end_matches('.').to_ascii_lowercase(), None),
            Some(Host::Ipv4(v4)) => (v4.to_string(), Some(IpAddr::V4(v4))),
            Some(Host::Ipv6(v6)) => (v6.to_string(), Some(IpAddr::V6(v6))),
            None => {
                return Err(EgressRefusal::Malformed {
                    url: raw.to_owned(),
                    reason: "no host".into(),
                });
            }
        };
        let allowed = match literal {
            Some(ip) => self.address_allowed(ip),
            None => self.name_allowed(&host),
        };
        if !allowed {
            if let Some(ip) = literal {
                if let Some(range) = blocked_range(ip) {
                    return Err(EgressRefusal::Address { host, ip, range });
                }
            } else if let Some(why) = internal_name(&host) {
                return Err(EgressRefusal::InternalName { host, why });
            }
        }
        Ok(Target {
            url,
            host,
            port,
            literal,
            allowed,
        })
    }

    /// Given every address `target`'s host resolved to, the one to connect to (the first),
    /// or why none may be used.
    pub fn check_resolved(
        &self,
        target: &Target,
        addrs: &[IpAddr],
    ) -> Result<IpAddr, EgressRefusal> {
        let first = *addrs.first().ok_or_else(|| EgressRefusal::Unresolved {
            host: target.host.clone(),
        })?;
        if !target.allowed {
            for &ip in addrs {
                if self.address_allowed(ip) {
                    continue;
                }
                if let Some(range) = blocked_range(ip) {
                    return Err(EgressRefusal::Address {
                        host: target.host.clone(),
                        ip,
                        range,
                    });
                }
            }
        }
        Ok(first)
    }
}

fn internal_name(host: &str) -> Option<&'static str> {
    if INTERNAL_NAMES.contains(&host) {
        return Some("a reserved local or metadata name");
    }
    if INTERNAL_SUFFIXES.iter().any(|s| host.ends_with(s)) {
        return Some("a local, cluster or cloud-internal domain");
    }
    if !host.contains('.') {
        // A single label resolves through the pod's DNS search path to a cluster Service.
        return Some("a single-label name, which resolves to a cluster Service");
    }
    None
}

fn is_host_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(policy: &EgressPolicy, url: &str) -> EgressRefusal {
        policy.check_url(url).expect_err(url)
    }

    #[test]
    fn literal_internal_addresses_are_refused_in_every_spelling() {
        let p = EgressPolicy::default();
        for (url, range) in [
            ("http://127.0.0.1:65535/", BlockedRange::Loopback),
            ("http://2130706433/", BlockedRange::Loopback),
            ("http://0x7f.1/", BlockedRange::Loopback),
            ("http://[::1]/", BlockedRange::Loopback),
            ("http://[::ffff:127.0.0.1]/", BlockedRange::Loopback),
            ("http://10.0.0.5/", BlockedRange::Private),
            ("http://172.16.3.4/", BlockedRange::Private),
            ("http://192.168.1.1/", BlockedRange::Private),
            ("http://100.64.0.1/", BlockedRange::SharedAddressSpace),
            (
                "http://169.254.169.254/latest/meta-data",
                BlockedRange::LinkLocal,
            ),
            ("http://[fe80::1]/", BlockedRange::LinkLocal),
            ("http://[fd00:ec2::254]/", BlockedRange::UniqueLocal),
            ("http://[2002:a9fe:a9fe::]/", BlockedRange::LinkLocal),
            ("http://[64:ff9b::a00:1]/", BlockedRange::Private),
            ("http://0.0.0.0/", BlockedRange::Unspecified),
            ("http://224.0.0.1/", BlockedRange::Multicast),
            ("http://255.255.255.255/", BlockedRange::Broadcast),
            ("http://240.0.0.1/", BlockedRange::Reserved),
        ] {
            match refused(&p, url) {
                EgressRefusal::Address { range: got, .. } => assert_eq!(got, range, "{url}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }

    #[test]
    fn internal_names_are_refused_before_dns() {
        let p = EgressPolicy::default();
        for url in [
            "http://localhost:8080/",
            "http://LOCALHOST./",
            "http://metadata.google.internal/computeMetadata/v1/",
            "http://api.localhost/",
            "http://printer.local/",
            "http://nats.openwop.svc:4222/",
            "http://kubernetes.default.svc.cluster.local/",
            "http://openwop-operator/",
        ] {
            assert!(
                matches!(refused(&p, url), EgressRefusal::InternalName { .. }),
                "{url}"
            );
        }
    }

    #[test]
    fn public_targets_pass_and_keep_their_port() {
        let p = EgressPolicy::default();
        let t = p
            .check_url("https://api.example.com/v1/tickets?x=1")
            .unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.literal, t.allowed),
            ("api.example.com", 443, None, false)
        );
        let t = p.check_url("http://93.184.216.34:8080/").unwrap();
        assert_eq!(t.port, 8080);
        assert_eq!(t.literal, Some("93.184.216.34".parse().unwrap()));
    }

    #[test]
    fn scheme_credentials_and_syntax_have_their_own_errors() {
        let p = EgressPolicy::default();
        assert!(matches!(
            refused(&p, "not a url"),
            EgressRefusal::Malformed { .. }
        ));
        assert!(matches!(
            refused(&p, "file:///etc/passwd"),
            EgressRefusal::Scheme { .. }
        ));
        assert!(matches!(
            refused(&p, "gopher://example.com/"),
            EgressRefusal::Scheme { .. }
        ));
        assert!(matches!(
            refused(&p, "https://user:pw@example.com/"),
            EgressRefusal::Credentials
        ));
        let https = EgressPolicy::default().https_only();
        let err = refused(&https, "http://example.com/hook");
        assert_eq!(
            err.to_string(),
            "scheme `http` is not allowed here; use https"
        );
    }

    #[test]
    fn every_resolved_address_must_be_public_and_the_first_is_pinned() {
        let p = EgressPolicy::default();
        let t = p.check_url("https://rebind.example.com/").unwrap();
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        let private: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(p.check_resolved(&t, &[public]).unwrap(), public);
        let err = p.check_resolved(&t, &[public, private]).unwrap_err();
        assert!(matches!(err, EgressRefusal::Address { ip, .. } if ip == private));
        assert!(matches!(
            p.check_resolved(&t, &[]),
            Err(EgressRefusal::Unresolved { .. })
        ));
    }

    #[test]
    fn the_allow_list_opens_names_suffixes_addresses_and_blocks() {
        let p = EgressPolicy::allowing([
            "ticketing.tools.svc",
            "*.corp.example",
            "127.0.0.1",
            "10.20.0.0/16",
        ])
        .unwrap();
        let t = p.check_url("http://ticketing.tools.svc:8080/").unwrap();
        assert!(t.allowed);
        let loopback: IpAddr = "10.96.0.10".parse().unwrap();
        assert_eq!(p.check_resolved(&t, &[loopback]).unwrap(), loopback);
        assert!(p.check_url("http://jira.corp.example/").unwrap().allowed);
        assert!(p.check_url("http://127.0.0.1:9000/").unwrap().allowed);
        assert!(p.check_url("http://10.20.3.4/").unwrap().allowed);
        // An allowed block does not open its neighbours, and a name outside the list is judged
        // by what it resolves to.
        assert!(matches!(
            refused(&p, "http://10.21.0.1/"),
            EgressRefusal::Address { .. }
        ));
        let t = p.check_url("https://public.example.com/").unwrap();
        assert!(
            p.check_resolved(&t, &["10.20.9.9".parse().unwrap()])
                .is_ok()
        );
        assert!(
            p.check_resolved(&t, &["10.30.9.9".parse().unwrap()])
                .is_err()
        );
    }

    #[test]
    fn a_bad_allow_entry_is_named() {
        let err = EgressPolicy::allowing(["ok.example", "http://x"]).unwrap_err();
        assert_eq!(err.0, "http://x");
        assert!(err.to_string().contains("`http://x`"));
    }

    #[test]
    fn refusals_say_what_to_do() {
        let err = refused(&EgressPolicy::default(), "http://169.254.169.254/");
        assert_eq!(
            err.to_string(),
            "host `169.254.169.254` is (or resolves to) 169.254.169.254, a link-local (cloud metadata) address; a platform admin can allow the host in the chart's egress allow list"
        );
    }
}
