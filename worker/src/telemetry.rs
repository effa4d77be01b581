//! OpenTelemetry spans over OTLP/HTTP (protobuf): `openwop.run` → `openwop.node` →
//! `openwop.provider.call` / `openwop.envelope`, with `openwop.*` attributes.
//!
//! Off unless an endpoint is configured: `OPENWOP_OTLP_ENDPOINT` (set by the operator from
//! chart `worker.otlpEndpoint`) or the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL;
//! `/v1/traces` is appended), or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full traces URL);
//! with the conformance seams on, also `OPENWOP_TEST_OTEL_SCRAPE_ENDPOINT` (the operator's
//! span store, a full URL). Off, every span call is a no-op. Every string attribute and status message passes through the run's [`Redactor`],
//! so no secret reaches the collector. Spans are batched on the SDK's own thread; the
//! worker calls [`Otel::shutdown`] before it exits (terminal, suspended or stopped) so
//! nothing buffered is lost.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::{Status, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use openwop_protocol::redact::Redactor;
use openwop_protocol::run::env::WorkerEnv;
use openwop_protocol::run::telemetry::{AttrValue, ERROR_CODE, NAMESPACE, RUN_ID};

/// Why the exporter could not be set up (the worker then runs without spans and says so).
#[derive(Debug, thiserror::Error)]
#[error("OTLP trace export to {endpoint} cannot be set up: {reason}; check the endpoint URL")]
pub struct OtelError {
    pub endpoint: String,
    pub reason: String,
}

/// Every traces URL to export to: the collector's (if configured) and the operator's span
/// store (conformance seams only). Empty: export is off. `get` reads the standard
/// `OTEL_EXPORTER_OTLP_*` variables; ours come from the pod's [`WorkerEnv`].
pub fn endpoints_from_env(wenv: &WorkerEnv, get: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let scrape = wenv
        .testing
        .otel_scrape_endpoint
        .clone()
        .filter(|v| !v.trim().is_empty());
    endpoint_from_env(wenv.otlp_endpoint.as_deref(), get)
        .into_iter()
        .chain(scrape)
        .collect()
}

/// The collector's traces URL, if export to one is enabled: the full
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else the base URL `otlp_endpoint`
/// ([`openwop_protocol::run::env::OTLP_ENDPOINT`]) or `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub fn endpoint_from_env(
    otlp_endpoint: Option<&str>,
    get: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    if let Some(full) = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Some(full);
    }
    let base = otlp_endpoint
        .filter(|v| !v.trim().is_empty())
        .map(str::to_owned)
        .or_else(|| get("OTEL_EXPORTER_OTLP_ENDPOINT"))?;
    let base = base.trim_end_matches('/');
    Some(if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    })
}

/// The process's tracer provider (or nothing when export is off).
#[derive(Debug, Default)]
pub struct Otel {
    provider: Option<SdkTracerProvider>,
}

impl Otel {
    /// No export.
    pub fn off() -> Self {
        Otel::default()
    }

    /// Exports to every URL of `endpoints` (full `/v1/traces` URLs: the cluster's collector
    /// and, with the conformance seams on, the operator's span store) with OTLP/HTTP
    /// protobuf. `run` (name, value) pairs go on the resource, so every exported batch names
    /// its run ([`openwop_protocol::run::telemetry`]).
    pub fn to_endpoints(
        endpoints: &[String],
        run: &[(&'static str, String)],
    ) -> Result<Self, OtelError> {
        let mut resource = Resource::builder()
            .with_service_name("openwop-worker")
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
        for (k, v) in run {
            resource = resource.with_attribute(KeyValue::new(*k, v.clone()));
        }
        let mut provider = SdkTracerProvider::builder().with_resource(resource.build());
        for endpoint in endpoints {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(endpoint)
                .with_timeout(Duration::from_secs(5))
                .build()
                .map_err(|e| OtelError {
                    endpoint: endpoint.clone(),
                    reason: e.to_string(),
                })?;
            provider = provider.with_batch_exporter(exporter);
        }
        Ok(Otel {
            provider: Some(provider.build()),
        })
    }

    /// The worker's exporter as the pod's environment configures it ([`endpoints_from_env`]):
    /// off when no endpoint is set, and off with a warning when none can be set up (spans are
    /// never a reason not to run).
    pub fn for_worker(wenv: &WorkerEnv, get: impl Fn(&str) -> Option<String>) -> Self {
        let endpoints = endpoints_from_env(wenv, get);
        if endpoints.is_empty() {
            return Otel::off();
        }
        // The resource names the run, so a span store can file every batch under it.
        let run: Vec<(&'static str, String)> = [
            (RUN_ID, wenv.run_id.clone()),
            (NAMESPACE, wenv.run_namespace.clone()),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect();
        Otel::to_endpoints(&endpoints, &run).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "running without OTLP spans");
            Otel::off()
        })
    }

    pub fn is_on(&self) -> bool {
        self.provider.is_some()
    }

    /// The tracing handle for one run; every string it records is redacted with `redactor`.
    pub fn telemetry(&self, redactor: Arc<Redactor>) -> Telemetry {
        Telemetry {
            inner: self.provider.as_ref().map(|p| {
                Arc::new(Inner {
                    tracer: p.tracer("openwop-worker"),
                    redactor,
                })
            }),
        }
    }

    /// Exports what is buffered and stops the exporter. Blocking: call outside the runtime.
    pub fn shutdown(&self) {
        if let Some(p) = &self.provider
            && let Err(e) = p.shutdown_with_timeout(Duration::from_secs(5))
        {
            tracing::warn!(error = %e, "OTLP span export did not finish");
        }
    }
}

struct Inner {
    tracer: SdkTracer,
    redactor: Arc<Redactor>,
}

/// Starts spans for one run; a no-op when export is off.
#[derive(Clone, Default)]
pub struct Telemetry {
    inner: Option<Arc<Inner>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("on", &self.inner.is_some())
            .finish()
    }
}

impl Telemetry {
    /// A root span (`openwop.run`).
    pub fn root(&self, name: &'static str) -> SpanHandle {
        SpanHandle::start(self.inner.clone(), name, &Context::new())
    }
}

/// One span; ended when the owning handle is dropped.
#[derive(Default)]
pub struct SpanHandle {
    span: Option<(Context, Arc<Inner>)>,
    owned: bool,
}

impl std::fmt::Debug for SpanHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanHandle")
            .field("on", &self.span.is_some())
            .finish()
    }
}

impl SpanHandle {
    /// A span that records nothing.
    pub fn none() -> Self {
        SpanHandle::default()
    }

    fn start(inner: Option<Arc<Inner>>, name: &'static str, parent: &Context) -> SpanHandle {
        SpanHandle {
            span: inner.map(|i| {
                let span = i.tracer.start_with_context(name, parent);
                (parent.with_span(span), i)
            }),
            owned: true,
        }
    }

    /// A second handle on the same span that does not end it (for a parent kept elsewhere).
    pub fn borrowed(&self) -> SpanHandle {
        SpanHandle {
            span: self.span.clone(),
            owned: false,
        }
    }

    /// A child span.
    pub fn child(&self, name: &'static str) -> SpanHandle {
        match &self.span {
            Some((cx, i)) => SpanHandle::start(Some(i.clone()), name, cx),
            None => SpanHandle::none(),
        }
    }

    /// A string attribute, redacted.
    pub fn set_str(&self, key: &'static str, value: &str) {
        if let Some((cx, i)) = &self.span {
            let v = i.redactor.redact_str(value).0.into_owned();
            cx.span().set_attribute(KeyValue::new(key, v));
        }
    }

    pub fn set_i64(&self, key: &'static str, value: i64) {
        if let Some((cx, _)) = &self.span {
            cx.span().set_attribute(KeyValue::new(key, value));
        }
    }

    pub fn set_bool(&self, key: &'static str, value: bool) {
        if let Some((cx, _)) = &self.span {
            cx.span().set_attribute(KeyValue::new(key, value));
        }
    }

    /// Every attribute of `attrs` (strings redacted).
    pub fn set_all(&self, attrs: &[(&'static str, AttrValue)]) {
        for (k, v) in attrs {
            match v {
                AttrValue::Str(s) => self.set_str(k, s),
                AttrValue::Int(i) => self.set_i64(k, *i),
                AttrValue::Bool(b) => self.set_bool(k, *b),
            }
        }
    }

    /// Marks the span failed with `code` (`openwop.error_code`) and a redacted message.
    pub fn fail(&self, code: &str, message: &str) {
        if let Some((cx, i)) = &self.span {
            self.set_str(ERROR_CODE, code);
            let msg = i.redactor.redact_str(message).0.into_owned();
            cx.span().set_status(Status::error(msg));
        }
    }
}

impl Drop for SpanHandle {
    fn drop(&mut self) {
        if let Some((cx, _)) = &self.span
            && self.owned
        {
            cx.span().end();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_resolution_is_off_by_default() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(endpoint_from_env(None, env(&[])), None);
        assert_eq!(
            endpoint_from_env(Some(" "), env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])),
            None
        );
        assert_eq!(
            endpoint_from_env(
                None,
                env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")])
            )
            .as_deref(),
            Some("http://c:4318/v1/traces")
        );
        assert_eq!(
            endpoint_from_env(
                Some("http://o:4318/v1/traces"),
                env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")])
            )
            .as_deref(),
            Some("http://o:4318/v1/traces")
        );
        assert_eq!(
            endpoint_from_env(
                Some("http://o:4318"),
                env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/x")])
            )
            .as_deref(),
            Some("http://t:1/x")
        );
        // With the seams on, the operator's span store is a second destination.
        let mut wenv = WorkerEnv {
            otlp_endpoint: Some("http://o:4318".into()),
            ..WorkerEnv::default()
        };
        wenv.testing.otel_scrape_endpoint = Some("http://op:8080/v1/traces".into());
        assert_eq!(
            endpoints_from_env(&wenv, env(&[])),
            ["http://o:4318/v1/traces", "http://op:8080/v1/traces"]
        );
    }

    #[test]
    fn off_spans_are_no_ops() {
        let t = Otel::off().telemetry(Arc::new(Redactor::default()));
        let run = t.root("openwop.run");
        let node = run.child("openwop.node");
        node.set_str("k", "v");
        node.fail("c", "m");
        assert!(node.span.is_none() && run.span.is_none());
    }
}
