//! The OpenWOP v1 REST API (`spec/v1/rest-endpoints.md`), served by every operator replica
//! beside discovery on the operator's HTTP server.
//!
//! Reads come from this replica's own caches of Runs and Workflows (the process's one watch
//! of each, [`crate::controller::Feed`], which the leader's controllers share) and from
//! JetStream; writes are ordinary Kubernetes writes (create a `Run`, patch its spec), so
//! the leader's controllers do the rest and `kubectl` sees everything the API does.
//!
//! One file per resource — [`runs`] (create, read), [`cancel`] (one run, or many with
//! `:bulk-cancel`), [`pause`] (`:pause` / `:resume`), [`interrupts`] (run-scoped and by
//! signed token), [`events`] (SSE and JSON by stream mode, and long-poll),
//! [`workflows`], [`tools`] (the tool catalog) — over [`types`] (request and response bodies),
//! [`support`] (cache lookups shared by several resources), [`json`] (the one JSON body
//! extractor: a malformed body is an [`ApiError`], never axum's plain text), [`idempotency`]
//! (`Idempotency-Key` on every mutation) and [`error`]
//! (the one error type, REST and conformance seams alike). Run creation calls optional
//! [`RunHooks`] (the conformance seams, when on); this module knows nothing else of them.
//!
//! Auth is Kubernetes' ([`auth`]): a bearer token checked by `TokenReview` gives the
//! [`Caller`] extractor; every action is checked by a `SubjectAccessReview` through
//! [`Authenticator::authorize`] in the namespace concerned (tenant = namespace).
//!
//! # Mounting another Router
//!
//! Build an [`OpenApiRouter<RestState>`] (or a plain `axum::Router<RestState>` turned into
//! one with `OpenApiRouter::from(router)` — its routes then serve but stay out of
//! `/v1/openapi.json`) and pass it to [`router`] as `extra`. Handlers authenticate by taking
//! a [`Caller`] argument (401 without a valid token) and authorize each action with
//! `state.auth.authorize(&caller, Verb::Create, Resource::Runs, namespace).await?` (403), or
//! [`Authenticator::allowed`] where a refusal must read as 404. Error bodies are
//! [`ApiError`]; JSON bodies are read with [`Json`]. Everything mounted this way shares the body limit and the 429 load shedding.
//!
//! ```ignore
//! async fn reset(State(s): State<RestState>, caller: Caller) -> Result<StatusCode, ApiError> {
//!     let ns = s.tenant(&caller, None)?;
//!     s.auth.authorize(&caller, Verb::Patch, Resource::Runs, &ns).await?;
//!     Ok(StatusCode::NO_CONTENT)
//! }
//! let extra = OpenApiRouter::new().route("/v1/host/sample/test/reset", post(reset));
//! let app = rest::router(state, extra);
//! ```

pub mod auth;
pub mod browse;
pub mod cancel;
pub mod error;
pub mod events;
pub mod idempotency;
pub mod interrupts;
pub mod json;
pub mod log;
pub mod pause;
pub mod runs;
pub mod session;
pub mod state;
pub mod support;
mod tools;
pub mod types;
mod variables;
pub mod view;
mod webhooks;
mod workflows;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::{Authenticator, Caller, Resource, Verb};
pub use error::{ApiError, ErrorBody, ErrorShape};
pub use json::Json;
pub use state::{RestState, RunHooks};
pub use support::{find_run, find_workflow, visible_run};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "OpenWOP v1 on Kubernetes (openwop-operator)",
        description = "OpenWOP v1 REST API. Authenticate with `Authorization: Bearer <token>` \
                       (any token the cluster accepts, e.g. `kubectl create token`); access is \
                       Kubernetes RBAC on runs.openwop.dev / workflows.openwop.dev in the run's \
                       namespace (tenantId)."
    ),
    // `:pause` / `:resume` share the router's `POST /v1/runs/{runId}` (see `pause`).
    paths(pause::pause_run, pause::resume_run),
    components(schemas(ErrorBody)),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The API routes (with `extra` merged in) and `GET /v1/openapi.json` describing them.
pub fn router(state: RestState, extra: OpenApiRouter<RestState>) -> axum::Router {
    let max_body = state.rest().max_body_bytes;
    let (api, doc) = api_routes().merge(extra).split_for_parts();
    let doc = Arc::new(doc_value(&doc));
    api.route_layer(middleware::from_fn_with_state(state.clone(), shed_load))
        .layer(DefaultBodyLimit::max(max_body))
        .route(
            "/v1/openapi.json",
            axum::routing::get(move || {
                let d = doc.clone();
                async move { Json((*d).clone()) }
            }),
        )
        .with_state(state)
}

fn doc_value(doc: &utoipa::openapi::OpenApi) -> Value {
    let mut v = serde_json::to_value(doc).unwrap_or_default();
    // Every operation except discovery needs the bearer token.
    v["security"] = serde_json::json!([{"bearer": []}]);
    v
}

/// The OpenAPI document of the API as mounted with no extra routes (tests, docs).
pub fn openapi() -> Value {
    let (_, doc) = api_routes().split_for_parts();
    doc_value(&doc)
}

/// The OpenWOP v1 endpoints, described by their handlers' own types.
fn api_routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(workflows::get_workflow))
        .routes(routes!(runs::create_run))
        .routes(routes!(runs::get_run))
        .routes(routes!(events::run_events))
        .routes(routes!(events::poll_events))
        .routes(routes!(cancel::cancel_run))
        .routes(routes!(cancel::bulk_cancel))
        .route("/v1/runs/{runId}", axum::routing::post(pause::run_action))
        .routes(routes!(interrupts::resolve_interrupt))
        .routes(routes!(
            interrupts::inspect_interrupt_by_token,
            interrupts::resolve_interrupt_by_token
        ))
        .routes(routes!(browse::list_runs))
        .routes(routes!(browse::list_tenants))
        .routes(routes!(browse::run_reasoning))
        .routes(routes!(webhooks::register_webhook))
        .routes(routes!(webhooks::unregister_webhook))
        .routes(routes!(tools::list_tools))
        .routes(routes!(tools::get_tool))
        // A `toolId` sent with its `/` unencoded (see `tools`); the parameter keeps the
        // name of the route above, as the router requires at one position.
        .route(
            "/v1/tools/{toolId}/{tool}",
            axum::routing::get(tools::get_tool_unencoded),
        )
}

/// 429 with `Retry-After` once `rest.maxInFlight` requests are being served. A request counts
/// until its response body is done, so an open SSE event stream holds its place for as long
/// as the client follows it.
async fn shed_load(State(s): State<RestState>, req: Request, next: Next) -> Response {
    match s.load.clone().try_acquire_owned() {
        Ok(permit) => next.run(req).await.map(|body| {
            Body::new(PermittedBody {
                body,
                _permit: permit,
            })
        }),
        Err(_) => ApiError::rate_limited(
            "the API is at its concurrent request limit; retry after the indicated delay",
            Duration::from_secs(1),
            // rest.maxInFlight counts every request this replica serves.
            "global",
        )
        .into_response(),
    }
}

/// A response body holding one `rest.maxInFlight` permit until it is finished or dropped
/// (the client went away).
struct PermittedBody {
    body: Body,
    _permit: OwnedSemaphorePermit,
}

impl http_body::Body for PermittedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` of `v`, recursively.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn the_openapi_document_is_complete_and_consistent() {
        let doc = openapi();
        assert_eq!(doc["openapi"], "3.1.0");
        let paths = doc["paths"].as_object().unwrap();
        for p in [
            "/v1/runs",
            "/v1/runs/{runId}",
            "/v1/runs/{runId}/events",
            "/v1/runs/{runId}/events/poll",
            "/v1/runs/{runId}/cancel",
            "/v1/runs:bulk-cancel",
            "/v1/runs/{runId}:pause",
            "/v1/runs/{runId}:resume",
            "/v1/runs/{runId}/interrupts/{nodeId}",
            "/v1/interrupts/{token}",
            "/v1/workflows/{workflowId}",
            "/v1/tools",
            "/v1/tools/{toolId}",
        ] {
            assert!(paths.contains_key(p), "{p} missing from {:?}", paths.keys());
        }
        for (path, item) in paths {
            for (method, op) in item.as_object().unwrap() {
                let responses = op["responses"].as_object().unwrap();
                assert!(!responses.is_empty(), "{method} {path}: no responses");
                // Every path template parameter is declared as a path parameter.
                for seg in path.split('/').filter(|s| s.starts_with('{')) {
                    // `{runId}:pause`: the parameter, then the operation.
                    let seg = seg.split(':').next().unwrap_or(seg);
                    let name = seg.trim_matches(['{', '}']);
                    let declared =
                        op["parameters"].as_array().into_iter().flatten().any(|p| {
                            p["name"] == name && p["in"] == "path" && p["required"] == true
                        });
                    assert!(
                        declared,
                        "{method} {path}: path parameter {name} not declared"
                    );
                }
                // The signed token is the credential of /v1/interrupts/{token}: no bearer.
                let want = if path == "/v1/interrupts/{token}" {
                    serde_json::json!([{}])
                } else {
                    serde_json::json!([{"bearer": []}])
                };
                if path != "/v1/openapi.json" {
                    assert_eq!(op["security"], want, "{method} {path}");
                }
            }
        }
        // Every reference resolves.
        let mut all = Vec::new();
        refs(&doc, &mut all);
        assert!(!all.is_empty());
        for r in all {
            let ptr = r
                .strip_prefix('#')
                .unwrap_or_else(|| panic!("external ref {r}"));
            assert!(doc.pointer(ptr).is_some(), "unresolved {r}");
        }
        assert_eq!(
            doc["components"]["securitySchemes"]["bearer"]["scheme"],
            "bearer"
        );
        for schema in [
            "ErrorBody",
            "RunSnapshotDoc",
            "CreateRunRequest",
            "EventsResponse",
        ] {
            assert!(
                doc["components"]["schemas"].get(schema).is_some(),
                "{schema}"
            );
        }
        assert_eq!(
            doc["components"]["schemas"]["CreateRunRequest"]["required"],
            serde_json::json!(["workflowId"])
        );
    }
}
