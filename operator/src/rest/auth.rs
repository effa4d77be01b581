//! Authentication and authorization the Kubernetes way.
//!
//! * `Authorization: Bearer <token>` is checked with a `TokenReview`, so ServiceAccount tokens
//!   and whatever else the cluster authenticates (OIDC, webhook) work unchanged. The result is
//!   the [`Caller`] extractor.
//! * Each action is checked with a `SubjectAccessReview` for the caller on
//!   `runs.openwop.dev` / `workflows.openwop.dev` in the namespace concerned
//!   ([`Authenticator::authorize`]), so access is granted with ordinary RBAC Roles.
//! * Both reviews are cached for a short TTL (keyed by a SHA-256 of the token, never the token
//!   itself), so a client polling a run does not cost two API requests per call.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{FromRef, FromRequestParts};
use axum::http::header;
use axum::http::request::Parts;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use openwop_crds::GROUP;
use sha2::{Digest, Sha256};

use super::error::ApiError;

/// Entries kept per cache before expired ones are swept (and, if still full, all dropped):
/// a bound on memory whatever callers send.
const MAX_CACHE_ENTRIES: usize = 10_000;

/// The authenticated caller of a request (from the `TokenReview`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// The cluster authenticated the token as `system:anonymous` (anonymous auth enabled).
    pub is_anonymous: bool,
    /// For a ServiceAccount (`system:serviceaccount:<ns>:<name>`), its namespace: the
    /// default tenant of the runs it creates.
    pub service_account_namespace: Option<String>,
    /// `user.extra` of the review, passed on to SubjectAccessReviews (scopes, pod binding).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Caller {
    fn from_user(user: k8s_openapi::api::authentication::v1::UserInfo) -> Self {
        let username = user.username.unwrap_or_default();
        let groups = user.groups.unwrap_or_default();
        let is_anonymous =
            username == "system:anonymous" || groups.iter().any(|g| g == "system:unauthenticated");
        let service_account_namespace = username
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .map(|(ns, _)| ns.to_owned())
            .filter(|ns| !ns.is_empty());
        Caller {
            username,
            uid: user.uid.unwrap_or_default(),
            groups,
            is_anonymous,
            service_account_namespace,
            extra: user.extra.unwrap_or_default(),
        }
    }
}

/// The resources of this API, as RBAC knows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    Runs,
    Workflows,
    /// Webhook subscriptions: not a Kubernetes object (they live in JetStream), checked as
    /// `webhooks.openwop.dev` so RBAC grants them like everything else.
    Webhooks,
}

impl Resource {
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Runs => "runs",
            Resource::Workflows => "workflows",
            Resource::Webhooks => "webhooks",
        }
    }
}

/// The RBAC verbs the API checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Create,
    Get,
    List,
    Watch,
    Patch,
    Delete,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

/// A failed review call (the Kubernetes API is unreachable or refused the operator).
#[derive(Debug, thiserror::Error)]
#[error("{review} failed: {source}")]
pub struct ReviewError {
    review: &'static str,
    #[source]
    source: kube::Error,
}

impl From<ReviewError> for ApiError {
    fn from(e: ReviewError) -> Self {
        tracing::warn!(error = %e, "access review failed");
        ApiError::unavailable(
            format!(
                "cannot check credentials right now ({}); retry shortly",
                e.review
            ),
            Duration::from_secs(2),
        )
    }
}

/// A small TTL map, bounded by [`MAX_CACHE_ENTRIES`].
struct TtlCache<K, V> {
    ttl: Duration,
    map: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    fn new(ttl: Duration) -> Self {
        TtlCache {
            ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, k: &K) -> Option<V> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.get(k)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, v)| v.clone())
    }

    fn put(&self, k: K, v: V) {
        if self.ttl.is_zero() {
            return;
        }
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_CACHE_ENTRIES {
            let ttl = self.ttl;
            map.retain(|_, (at, _)| at.elapsed() < ttl);
            if map.len() >= MAX_CACHE_ENTRIES {
                map.clear();
            }
        }
        map.insert(k, (Instant::now(), v));
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct AccessKey {
    username: String,
    uid: String,
    groups: Vec<String>,
    verb: Verb,
    resource: Resource,
    namespace: String,
}

/// TokenReview and SubjectAccessReview against the cluster, with a short cache.
pub struct Authenticator {
    client: Client,
    tokens: TtlCache<[u8; 32], Option<Caller>>,
    access: TtlCache<AccessKey, bool>,
}

impl Authenticator {
    /// Reviews are cached for `ttl` (zero disables the cache).
    pub fn new(client: Client, ttl: Duration) -> Self {
        Authenticator {
            client,
            tokens: TtlCache::new(ttl),
            access: TtlCache::new(ttl),
        }
    }

    /// The caller behind a bearer token, or 401.
    pub async fn authenticate(&self, token: &str) -> Result<Caller, ApiError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let cached = self.tokens.get(&key);
        let caller = match cached {
            Some(c) => c,
            None => {
                let c = self.token_review(token).await?;
                self.tokens.put(key, c.clone());
                c
            }
        };
        caller.ok_or_else(|| {
            ApiError::unauthenticated(
                "the bearer token was not accepted by the cluster (expired, revoked or unknown); \
                 get a new one, e.g. `kubectl create token <serviceaccount> -n <namespace>`",
            )
        })
    }

    async fn token_review(&self, token: &str) -> Result<Option<Caller>, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let out = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| ReviewError {
                review: "TokenReview",
                source,
            })?;
        let status = out.status.unwrap_or_default();
        Ok(match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Some(Caller::from_user(user)),
            _ => None,
        })
    }

    /// Whether RBAC allows `caller` to `verb` `resource` (group `openwop.dev`) in `namespace`.
    pub async fn allowed(
        &self,
        caller: &Caller,
        verb: Verb,
        resource: Resource,
        namespace: &str,
    ) -> Result<bool, ApiError> {
        let key = AccessKey {
            username: caller.username.clone(),
            uid: caller.uid.clone(),
            groups: caller.groups.clone(),
            verb,
            resource,
            namespace: namespace.to_owned(),
        };
        if let Some(v) = self.access.get(&key) {
            return Ok(v);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.username.clone()),
                uid: Some(caller.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(caller.groups.clone()),
                extra: Some(caller.extra.clone()).filter(|e| !e.is_empty()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(GROUP.to_owned()),
                    resource: Some(resource.as_str().to_owned()),
                    verb: Some(verb.as_str().to_owned()),
                    namespace: Some(namespace.to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let out = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| ReviewError {
                review: "SubjectAccessReview",
                source,
            })?;
        let allowed = out
            .status
            .is_some_and(|s| s.allowed && s.denied != Some(true));
        self.access.put(key, allowed);
        Ok(allowed)
    }

    /// `Ok(())` when RBAC allows the action, else 403 naming what is missing.
    pub async fn authorize(
        &self,
        caller: &Caller,
        verb: Verb,
        resource: Resource,
        namespace: &str,
    ) -> Result<(), ApiError> {
        if self.allowed(caller, verb, resource, namespace).await? {
            Ok(())
        } else {
            Err(forbidden(caller, verb, resource, namespace))
        }
    }
}

/// The 403 for a refused action: what the caller needs, in RBAC terms.
pub fn forbidden(caller: &Caller, verb: Verb, resource: Resource, namespace: &str) -> ApiError {
    let (v, r) = (verb.as_str(), resource.as_str());
    ApiError::forbidden(format!(
        "{} may not {v} {r}.{GROUP} in namespace {namespace}; grant it with a Role \
         (docs/rest-api.md, \"Who may call\")",
        caller.username
    ))
    .with_details(serde_json::json!({
        "verb": v, "group": GROUP, "resource": r, "namespace": namespace,
    }))
}

/// The bearer token of a request: `None` without an `Authorization` header, 401 when the
/// header is not `Bearer <token>`.
pub fn bearer_token(parts: &Parts) -> Result<Option<&str>, ApiError> {
    let Some(v) = parts.headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let v = v
        .to_str()
        .map_err(|_| ApiError::unauthenticated("the Authorization header is not ASCII"))?;
    match v.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(Some(token.trim()))
        }
        _ => Err(ApiError::unauthenticated(
            "the Authorization header must be `Bearer <token>`",
        )),
    }
}

impl<S> FromRequestParts<S> for Caller
where
    Arc<Authenticator>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        // The web UI's session cookie stands in for the header (unsafe methods must then
        // carry its CSRF proof); a bearer token, when present, always wins.
        let token = match bearer_token(parts)? {
            Some(t) => t.to_owned(),
            None => super::session::cookie_token(parts)?.ok_or_else(|| {
                ApiError::unauthenticated(
                    "this endpoint needs `Authorization: Bearer <token>`, e.g. a ServiceAccount \
                     token from `kubectl create token <serviceaccount> -n <namespace>`",
                )
            })?,
        };
        let auth = Arc::<Authenticator>::from_ref(state);
        auth.authenticate(&token).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::UserInfo;

    #[test]
    fn service_account_namespace_and_anonymity_come_from_the_user_info() {
        let sa = Caller::from_user(UserInfo {
            username: Some("system:serviceaccount:team-a:builder".into()),
            uid: Some("u1".into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            extra: None,
        });
        assert_eq!(sa.service_account_namespace.as_deref(), Some("team-a"));
        assert!(!sa.is_anonymous);
        let human = Caller::from_user(UserInfo {
            username: Some("alice@example.com".into()),
            ..Default::default()
        });
        assert_eq!(human.service_account_namespace, None);
        let anon = Caller::from_user(UserInfo {
            username: Some("system:anonymous".into()),
            groups: Some(vec!["system:unauthenticated".into()]),
            ..Default::default()
        });
        assert!(anon.is_anonymous);
    }

    #[test]
    fn the_cache_expires_and_stays_bounded() {
        let c: TtlCache<u32, bool> = TtlCache::new(Duration::from_millis(0));
        c.put(1, true);
        assert_eq!(c.get(&1), None, "a zero TTL caches nothing");
        let c: TtlCache<usize, bool> = TtlCache::new(Duration::from_secs(60));
        for i in 0..MAX_CACHE_ENTRIES + 5 {
            c.put(i, true);
        }
        assert!(c.map.lock().unwrap().len() <= MAX_CACHE_ENTRIES);
        assert_eq!(c.get(&(MAX_CACHE_ENTRIES + 4)), Some(true));
    }

    #[test]
    fn only_bearer_tokens_are_accepted() {
        let parts = |v: Option<&str>| {
            let mut b = axum::http::Request::builder();
            if let Some(v) = v {
                b = b.header(header::AUTHORIZATION, v);
            }
            b.body(()).unwrap().into_parts().0
        };
        assert_eq!(bearer_token(&parts(None)).unwrap(), None);
        assert_eq!(
            bearer_token(&parts(Some("Bearer abc"))).unwrap(),
            Some("abc")
        );
        assert_eq!(
            bearer_token(&parts(Some("bearer  abc "))).unwrap(),
            Some("abc")
        );
        for bad in ["Basic abc", "Bearer ", "abc"] {
            let e = bearer_token(&parts(Some(bad))).unwrap_err();
            assert_eq!(e.body.error, "unauthenticated", "{bad}");
        }
    }
}
