//! The HTTP node's config: checked at registration (closed, with ranges), read by the worker.
//!
//! Two dialects of one node. `core.openwop.http.fetch` (the published pack's config, closed:
//! `url`, `method`, `headers`, `timeoutMs`, `retry`, `idempotency`) and its alias
//! `core.http.request` (the reference Postgres host's names: `url`, `method`, `headers`,
//! `body`, `timeoutMs`, `expectStatus`; no retries). Both become one [`HttpConfig`].
//!
//! Templates: `{{name}}` in `url` is filled from the node's `variables` input (each value
//! percent-encoded, so a value never changes the URL's structure); `{{secrets.NAME}}` in a
//! header value is filled from the Workflow's `spec.secrets` entry NAME (a Kubernetes Secret
//! key the worker pod mounts). A secret is never allowed in the URL: URLs end up in access
//! logs, proxies and error messages.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::schema::ValidationIssue;

/// Longest `url` (the pack's bound).
pub const MAX_URL_CHARS: usize = 2048;
/// Longest header value (the pack's bound).
pub const MAX_HEADER_VALUE_CHARS: usize = 8192;
/// Per-attempt timeout bounds and default, milliseconds (the pack's).
pub const TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=120_000;
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// `retry.maxAttempts` bounds and default (includes the first try).
pub const MAX_ATTEMPTS_RANGE: std::ops::RangeInclusive<u64> = 1..=10;
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// `retry.initialDelayMs` / `retry.maxDelayMs` bound and defaults.
pub const MAX_DELAY_MS: u64 = 60_000;
pub const DEFAULT_INITIAL_DELAY_MS: u64 = 500;
pub const DEFAULT_MAX_DELAY_MS: u64 = 8_000;

/// The prefix of a secret placeholder inside `{{ }}`.
pub const SECRET_PLACEHOLDER_PREFIX: &str = "secrets.";

/// Which config vocabulary a node type reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `core.openwop.http.fetch` (the pack's config).
    Fetch,
    /// `core.http.request` (the Postgres reference host's config).
    Request,
}

/// The HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
    Head,
    Options,
}

impl Method {
    pub const ALL: [Method; 7] = [
        Method::Get,
        Method::Post,
        Method::Put,
        Method::Patch,
        Method::Delete,
        Method::Head,
        Method::Options,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
            Method::Head => "HEAD",
            Method::Options => "OPTIONS",
        }
    }

    fn parse(s: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// GET, HEAD and OPTIONS: safe to repeat, sent without `Idempotency-Key`.
    pub fn is_idempotent_by_definition(self) -> bool {
        matches!(self, Method::Get | Method::Head | Method::Options)
    }

    /// POST, PUT and PATCH carry the request body; the others ignore it (the pack's rule).
    pub fn carries_body(self) -> bool {
        matches!(self, Method::Post | Method::Put | Method::Patch)
    }
}

/// Retries of 5xx answers and network errors (4xx and guard refusals are never retried).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts including the first (1 = no retry).
    pub max_attempts: u32,
    pub initial_delay_ms: u64,
    pub max_delay_ms: u64,
}

impl RetryPolicy {
    /// The wait before attempt `attempt` (1-based; none before the first):
    /// `min(maxDelayMs, initialDelayMs · 2^(attempt−2))`.
    pub fn delay_before(&self, attempt: u32) -> u64 {
        if attempt <= 1 {
            return 0;
        }
        let factor = 1u64.checked_shl(attempt - 2).unwrap_or(u64::MAX);
        self.initial_delay_ms
            .saturating_mul(factor)
            .min(self.max_delay_ms)
    }
}

/// One node's HTTP call, as configured.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    /// The URL template (`{{name}}` placeholders).
    pub url: String,
    pub method: Method,
    /// Header name (as written) → value template (`{{secrets.NAME}}` placeholders).
    pub headers: BTreeMap<String, String>,
    pub timeout_ms: u64,
    pub retry: RetryPolicy,
    /// Send `Idempotency-Key` on POST, PUT, PATCH and DELETE.
    pub idempotency_key: bool,
    /// A request body given in config (`core.http.request`); the `body` input wins.
    pub body: Option<Value>,
    /// Statuses that count as success (`core.http.request`'s `expectStatus`); any other
    /// fails the node with `http_unexpected_status`. `None`: every status completes.
    pub expect_status: Option<Vec<u16>>,
}

fn issue(path: &str, keyword: &str, message: impl Into<String>) -> ValidationIssue {
    ValidationIssue {
        instance_path: path.to_owned(),
        keyword: keyword.to_owned(),
        message: message.into(),
    }
}

/// The placeholders of `template` (the text between `{{` and `}}`, trimmed), or the byte
/// offset of an unclosed `{{`.
pub fn placeholders(template: &str) -> Result<Vec<&str>, usize> {
    let mut out = Vec::new();
    let mut rest = template;
    let mut offset = 0;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            return Err(offset + open);
        };
        out.push(after[..close].trim());
        let consumed = open + 2 + close + 2;
        offset += consumed;
        rest = &rest[consumed..];
    }
    Ok(out)
}

/// The name of a `{{secrets.NAME}}` placeholder.
fn secret_name(placeholder: &str) -> Option<&str> {
    placeholder.strip_prefix(SECRET_PLACEHOLDER_PREFIX)
}

/// A `spec.secrets[].name` (and a placeholder's NAME): a letter, then letters, digits,
/// `_` or `-`, at most 63.
pub fn is_secret_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.len() <= 63
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// An RFC 9110 header field name.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn int_in(
    v: &Value,
    path: &str,
    range: std::ops::RangeInclusive<u64>,
    issues: &mut Vec<ValidationIssue>,
) -> Option<u64> {
    match v.as_u64() {
        Some(n) if range.contains(&n) => Some(n),
        _ => {
            issues.push(issue(
                path,
                "range",
                format!(
                    "must be an integer from {} to {}",
                    range.start(),
                    range.end()
                ),
            ));
            None
        }
    }
}

fn check_url(v: Option<&Value>, issues: &mut Vec<ValidationIssue>) -> String {
    let Some(v) = v else {
        issues.push(issue("", "required", "`url` is required"));
        return String::new();
    };
    let Some(url) = v.as_str() else {
        issues.push(issue("/url", "type", "must be a string"));
        return String::new();
    };
    if url.is_empty() || url.chars().count() > MAX_URL_CHARS {
        issues.push(issue(
            "/url",
            "length",
            format!("must be 1 to {MAX_URL_CHARS} characters"),
        ));
    }
    match placeholders(url) {
        Err(_) => issues.push(issue("/url", "template", "has `{{` without a closing `}}`")),
        Ok(names) => {
            for name in names {
                if secret_name(name).is_some() {
                    issues.push(issue(
                        "/url",
                        "template",
                        "a secret cannot go into the URL (URLs reach access logs and error messages); send it in a header, e.g. `Authorization: Bearer {{secrets.NAME}}`",
                    ));
                } else if !is_variable_name(name) {
                    issues.push(issue(
                        "/url",
                        "template",
                        "placeholders are `{{name}}` with a name of letters, digits, `_`, `-` or `.`, filled from the node's `variables` input",
                    ));
                }
            }
        }
    }
    // A URL without placeholders can be judged now; with them, at run time.
    if placeholders(url).is_ok_and(|p| p.is_empty())
        && !url.is_empty()
        && let Err(e) = url::Url::parse(url)
    {
        issues.push(issue(
            "/url",
            "format",
            format!("is not an absolute http(s) URL ({e})"),
        ));
    }
    url.to_owned()
}

fn check_headers(v: &Value, issues: &mut Vec<ValidationIssue>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(m) = v.as_object() else {
        issues.push(issue("/headers", "type", "must be an object of strings"));
        return out;
    };
    for (name, value) in m {
        let at = format!("/headers/{}", crate::text::escape_pointer(name));
        if !is_header_name(name) {
            issues.push(issue(&at, "propertyNames", "is not a valid header name"));
            continue;
        }
        if crate::egress::CLIENT_OWNED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            issues.push(issue(
                &at,
                "propertyNames",
                "is set by the HTTP client (framing, connection, proxy); remove it",
            ));
            continue;
        }
        let Some(s) = value.as_str() else {
            issues.push(issue(&at, "type", "must be a string"));
            continue;
        };
        if s.chars().count() > MAX_HEADER_VALUE_CHARS {
            issues.push(issue(
                &at,
                "maxLength",
                format!("must be at most {MAX_HEADER_VALUE_CHARS} characters"),
            ));
        }
        if s.contains(['\r', '\n']) {
            issues.push(issue(&at, "pattern", "must not contain line breaks"));
        }
        match placeholders(s) {
            Err(_) => issues.push(issue(&at, "template", "has `{{` without a closing `}}`")),
            Ok(names) => {
                for p in names {
                    if !secret_name(p).is_some_and(is_secret_name) {
                        issues.push(issue(
                            &at,
                            "template",
                            "header values take only `{{secrets.NAME}}` placeholders, NAME an entry of the Workflow's spec.secrets",
                        ));
                    }
                }
            }
        }
        out.insert(name.clone(), s.to_owned());
    }
    out
}

fn unknown_members(
    m: &Map<String, Value>,
    base: &str,
    known: &[&str],
    issues: &mut Vec<ValidationIssue>,
) {
    for k in m.keys().filter(|k| !known.contains(&k.as_str())) {
        issues.push(issue(
            &format!("{base}/{}", crate::text::escape_pointer(k)),
            "additionalProperties",
            format!(
                "is not a member of this config; members: {}",
                known.join(", ")
            ),
        ));
    }
}

impl HttpConfig {
    /// Reads and checks a node's config; every problem is reported, each at its JSON Pointer
    /// (relative to the config) and without instance values.
    pub fn parse(dialect: Dialect, config: &Value) -> Result<HttpConfig, Vec<ValidationIssue>> {
        let mut issues = Vec::new();
        let Some(c) = config.as_object() else {
            return Err(vec![issue("", "type", "config must be an object")]);
        };
        let known: &[&str] = match dialect {
            Dialect::Fetch => &[
                "url",
                "method",
                "headers",
                "timeoutMs",
                "retry",
                "idempotency",
            ],
            Dialect::Request => &[
                "url",
                "method",
                "headers",
                "body",
                "timeoutMs",
                "expectStatus",
            ],
        };
        unknown_members(c, "", known, &mut issues);
        let url = check_url(c.get("url"), &mut issues);
        let method = match c.get("method") {
            None => Method::Get,
            Some(v) => match v.as_str().and_then(Method::parse) {
                Some(m) => m,
                None => {
                    issues.push(issue(
                        "/method",
                        "enum",
                        "must be one of GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS",
                    ));
                    Method::Get
                }
            },
        };
        let headers = c
            .get("headers")
            .map(|h| check_headers(h, &mut issues))
            .unwrap_or_default();
        let timeout_ms = match (dialect, c.get("timeoutMs")) {
            (_, None) => DEFAULT_TIMEOUT_MS,
            (Dialect::Fetch, Some(v)) => {
                int_in(v, "/timeoutMs", TIMEOUT_MS_RANGE, &mut issues).unwrap_or_default()
            }
            // The reference host clamps rather than refuses: any positive number, capped.
            (Dialect::Request, Some(v)) => match v.as_f64() {
                Some(t) if t.is_finite() && t > 0.0 => {
                    (t as u64).clamp(*TIMEOUT_MS_RANGE.start(), *TIMEOUT_MS_RANGE.end())
                }
                _ => {
                    issues.push(issue("/timeoutMs", "type", "must be a positive number"));
                    DEFAULT_TIMEOUT_MS
                }
            },
        };
        let mut retry = RetryPolicy {
            max_attempts: match dialect {
                Dialect::Fetch => DEFAULT_MAX_ATTEMPTS,
                Dialect::Request => 1,
            },
            initial_delay_ms: DEFAULT_INITIAL_DELAY_MS,
            max_delay_ms: DEFAULT_MAX_DELAY_MS,
        };
        if let Some(r) = c.get("retry") {
            match r.as_object() {
                None => issues.push(issue("/retry", "type", "must be an object")),
                Some(r) => {
                    unknown_members(
                        r,
                        "/retry",
                        &["maxAttempts", "initialDelayMs", "maxDelayMs"],
                        &mut issues,
                    );
                    if let Some(v) = r.get("maxAttempts") {
                        retry.max_attempts =
                            int_in(v, "/retry/maxAttempts", MAX_ATTEMPTS_RANGE, &mut issues)
                                .unwrap_or(1) as u32;
                    }
                    if let Some(v) = r.get("initialDelayMs") {
                        retry.initial_delay_ms =
                            int_in(v, "/retry/initialDelayMs", 0..=MAX_DELAY_MS, &mut issues)
                                .unwrap_or_default();
                    }
                    if let Some(v) = r.get("maxDelayMs") {
                        retry.max_delay_ms =
                            int_in(v, "/retry/maxDelayMs", 0..=MAX_DELAY_MS, &mut issues)
                                .unwrap_or_default();
                    }
                }
            }
        }
        let mut idempotency_key = true;
        if let Some(i) = c.get("idempotency") {
            match i.as_object() {
                None => issues.push(issue("/idempotency", "type", "must be an object")),
                Some(i) => {
                    unknown_members(i, "/idempotency", &["mode"], &mut issues);
                    match i.get("mode").map(|m| m.as_str()) {
                        None | Some(Some("auto")) => {}
                        Some(Some("disabled")) => idempotency_key = false,
                        Some(_) => issues.push(issue(
                            "/idempotency/mode",
                            "enum",
                            "must be `auto` or `disabled`",
                        )),
                    }
                }
            }
        }
        if idempotency_key
            && !method.is_idempotent_by_definition()
            && headers
                .keys()
                .any(|h| h.eq_ignore_ascii_case("idempotency-key"))
        {
            issues.push(issue(
                "/headers/Idempotency-Key",
                "propertyNames",
                "the node sends a derived Idempotency-Key on this method; set idempotency.mode: disabled to send your own",
            ));
        }
        let expect_status = c.get("expectStatus").and_then(|v| {
            let list: Vec<&Value> = match v {
                Value::Array(a) => a.iter().collect(),
                one => vec![one],
            };
            let statuses: Option<Vec<u16>> = list
                .iter()
                .map(|s| {
                    s.as_u64()
                        .filter(|n| (100..=599).contains(n))
                        .map(|n| n as u16)
                })
                .collect();
            if statuses.as_ref().is_none_or(Vec::is_empty) {
                issues.push(issue(
                    "/expectStatus",
                    "type",
                    "must be a status (100..599) or a non-empty list of them",
                ));
            }
            statuses
        });
        if !issues.is_empty() {
            return Err(issues);
        }
        Ok(HttpConfig {
            url,
            method,
            headers,
            timeout_ms,
            retry,
            idempotency_key,
            body: c.get("body").cloned(),
            expect_status,
        })
    }

    /// Every `spec.secrets` name the header templates use, sorted, once each.
    pub fn secret_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .headers
            .values()
            .filter_map(|v| placeholders(v).ok())
            .flatten()
            .filter_map(secret_name)
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// Why a template could not be filled at run time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error(
        "the URL uses `{{{{{0}}}}}`, which the node's `variables` input does not give (a string, number or boolean)"
    )]
    MissingVariable(String),
    #[error(
        "header `{header}` uses `{{{{secrets.{name}}}}}`, but the run has no secret {name}: add {{name: {name}, secretRef: {{name, key}}}} to the Workflow's spec.secrets"
    )]
    MissingSecret { header: String, name: String },
}

/// Letters, digits and `-._~` stay; every other byte is `%XX`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn fill(
    template: &str,
    mut value: impl FnMut(&str) -> Result<String, TemplateError>,
) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            // Registration refuses an unclosed `{{`; keep it literal if one slips through.
            break;
        };
        out.push_str(&value(after[..close].trim())?);
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The URL with every `{{name}}` replaced by the percent-encoded value of `variables.name`.
pub fn fill_url(template: &str, variables: &Map<String, Value>) -> Result<String, TemplateError> {
    fill(template, |name| match variables.get(name) {
        Some(Value::String(s)) => Ok(percent_encode(s)),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(percent_encode(&v.to_string())),
        _ => Err(TemplateError::MissingVariable(name.to_owned())),
    })
}

/// The headers with every `{{secrets.NAME}}` replaced by the secret's value.
pub fn fill_headers<'s>(
    headers: &BTreeMap<String, String>,
    secret: impl Fn(&str) -> Option<&'s str>,
) -> Result<Vec<(String, String)>, TemplateError> {
    headers
        .iter()
        .map(|(name, template)| {
            let value = fill(template, |p| {
                let n = secret_name(p).unwrap_or(p);
                secret(n)
                    .map(str::to_owned)
                    .ok_or_else(|| TemplateError::MissingSecret {
                        header: name.clone(),
                        name: n.to_owned(),
                    })
            })?;
            Ok((name.clone(), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(r: Result<HttpConfig, Vec<ValidationIssue>>) -> Vec<String> {
        r.unwrap_err()
            .into_iter()
            .map(|i| i.instance_path)
            .collect()
    }

    #[test]
    fn the_pack_config_reads_with_its_defaults() {
        let c = HttpConfig::parse(Dialect::Fetch, &json!({"url": "https://api.example.com/x"}))
            .unwrap();
        assert_eq!(c.method, Method::Get);
        assert_eq!(c.timeout_ms, 30_000);
        assert_eq!(
            c.retry,
            RetryPolicy {
                max_attempts: 3,
                initial_delay_ms: 500,
                max_delay_ms: 8000
            }
        );
        assert!(c.idempotency_key);
        assert_eq!(c.expect_status, None);
        let c = HttpConfig::parse(
            Dialect::Fetch,
            &json!({"url": "https://api.example.com/users/{{userId}}", "method": "POST",
                    "headers": {"Authorization": "Bearer {{secrets.api-token}}", "Accept": "application/json"},
                    "timeoutMs": 5000, "retry": {"maxAttempts": 5, "initialDelayMs": 200, "maxDelayMs": 4000},
                    "idempotency": {"mode": "disabled"}}),
        )
        .unwrap();
        assert_eq!(
            (c.method, c.timeout_ms, c.retry.max_attempts),
            (Method::Post, 5000, 5)
        );
        assert!(!c.idempotency_key);
        assert_eq!(c.secret_names(), vec!["api-token"]);
    }

    #[test]
    fn every_config_problem_is_named_at_its_pointer() {
        let r = HttpConfig::parse(
            Dialect::Fetch,
            &json!({"method": "TRACE", "timeoutMs": 50, "retry": {"maxAttempts": 0, "jitter": true},
                    "idempotency": {"mode": "uuid"}, "headers": {"Host": "x", "X-A": 1, "bad name": "v"},
                    "body": {}}),
        );
        assert_eq!(
            paths(r),
            vec![
                "/body",
                "",
                "/method",
                "/headers/Host",
                "/headers/X-A",
                "/headers/bad name",
                "/timeoutMs",
                "/retry/jitter",
                "/retry/maxAttempts",
                "/idempotency/mode",
            ]
        );
    }

    #[test]
    fn an_own_idempotency_key_needs_the_derived_one_disabled() {
        let with = |mode: &str| {
            HttpConfig::parse(
                Dialect::Fetch,
                &json!({"url": "https://x.example/", "method": "POST",
                        "headers": {"idempotency-key": "mine"}, "idempotency": {"mode": mode}}),
            )
        };
        assert_eq!(paths(with("auto")), vec!["/headers/Idempotency-Key"]);
        assert!(with("disabled").is_ok());
    }

    #[test]
    fn secrets_go_in_headers_never_in_the_url() {
        let r = HttpConfig::parse(
            Dialect::Fetch,
            &json!({"url": "https://x.example/?key={{secrets.token}}"}),
        );
        let issues = r.unwrap_err();
        assert_eq!(issues[0].instance_path, "/url");
        assert!(
            issues[0].message.contains("header"),
            "{}",
            issues[0].message
        );
        let r = HttpConfig::parse(
            Dialect::Fetch,
            &json!({"url": "https://x.example/", "headers": {"X-Key": "{{token}}", "X-B": "{{secrets.bad name}}", "X-C": "{{secrets.ok"}}),
        );
        assert_eq!(
            paths(r),
            vec!["/headers/X-Key", "/headers/X-B", "/headers/X-C"]
        );
    }

    #[test]
    fn the_reference_host_dialect_reads_its_own_names() {
        let c = HttpConfig::parse(
            Dialect::Request,
            &json!({"url": "https://x.example/", "method": "POST", "body": {"a": 1},
                    "timeoutMs": 999999, "expectStatus": [200, 201]}),
        )
        .unwrap();
        assert_eq!(c.timeout_ms, 120_000);
        assert_eq!(c.retry.max_attempts, 1);
        assert_eq!(c.expect_status, Some(vec![200, 201]));
        assert_eq!(c.body, Some(json!({"a": 1})));
        let one = HttpConfig::parse(
            Dialect::Request,
            &json!({"url": "https://x.example/", "expectStatus": 204}),
        )
        .unwrap();
        assert_eq!(one.expect_status, Some(vec![204]));
        assert_eq!(
            paths(HttpConfig::parse(
                Dialect::Request,
                &json!({"url": "https://x.example/", "expectStatus": [], "retry": {}})
            )),
            vec!["/retry", "/expectStatus"]
        );
    }

    #[test]
    fn backoff_doubles_from_the_initial_delay_up_to_the_cap() {
        let r = RetryPolicy {
            max_attempts: 10,
            initial_delay_ms: 500,
            max_delay_ms: 8000,
        };
        let delays: Vec<u64> = (1..=7).map(|a| r.delay_before(a)).collect();
        assert_eq!(delays, vec![0, 500, 1000, 2000, 4000, 8000, 8000]);
        assert_eq!(r.delay_before(70), 8000);
    }

    #[test]
    fn url_values_are_encoded_and_missing_ones_named() {
        let vars = json!({"id": "a b/../c?d", "n": 42, "yes": true});
        let vars = vars.as_object().unwrap();
        assert_eq!(
            fill_url("https://x.example/u/{{ id }}?n={{n}}&f={{yes}}", vars).unwrap(),
            "https://x.example/u/a%20b%2F..%2Fc%3Fd?n=42&f=true"
        );
        assert_eq!(
            fill_url("https://x.example/{{missing}}", vars).unwrap_err(),
            TemplateError::MissingVariable("missing".into())
        );
    }

    #[test]
    fn header_secrets_are_filled_and_a_missing_one_says_where_to_declare_it() {
        let headers: BTreeMap<String, String> = [
            (
                "Authorization".to_owned(),
                "Bearer {{secrets.tok}}".to_owned(),
            ),
            ("Accept".to_owned(), "application/json".to_owned()),
        ]
        .into();
        let got = fill_headers(&headers, |n| (n == "tok").then_some("s3cr3t-value")).unwrap();
        assert_eq!(
            got,
            vec![
                ("Accept".to_owned(), "application/json".to_owned()),
                ("Authorization".to_owned(), "Bearer s3cr3t-value".to_owned())
            ]
        );
        let err = fill_headers(&headers, |_| None).unwrap_err();
        assert!(err.to_string().contains("spec.secrets"), "{err}");
        assert!(err.to_string().contains("{{secrets.tok}}"), "{err}");
    }
}
