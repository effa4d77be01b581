//! Prometheus metrics (`/metrics`): reconciles, durations, failures, runs by phase.

use std::sync::Arc;

use openwop_crds::RunPhase;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub controller: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: String,
}

/// All operator metrics.
#[derive(Clone)]
pub struct Metrics {
    pub reconciles: Family<ControllerLabels, Counter>,
    pub failures: Family<FailureLabels, Counter>,
    pub duration: Family<ControllerLabels, Histogram>,
    pub runs_by_phase: Family<PhaseLabels, Gauge>,
    pub registry: Arc<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("openwop_operator");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let failures = Family::<FailureLabels, Counter>::default();
        let duration = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0])
        });
        let runs_by_phase = Family::<PhaseLabels, Gauge>::default();
        registry.register("reconciles", "Reconciliations started", reconciles.clone());
        registry.register(
            "reconcile_failures",
            "Reconciliations that failed, by reason",
            failures.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconciliation duration",
            duration.clone(),
        );
        registry.register(
            "runs",
            "Runs by phase, as last observed",
            runs_by_phase.clone(),
        );
        Self {
            reconciles,
            failures,
            duration,
            runs_by_phase,
            registry: Arc::new(registry),
        }
    }
}

impl Metrics {
    pub fn reconcile_started(&self, controller: &str) {
        self.reconciles
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .inc();
    }

    pub fn reconcile_failed(&self, controller: &str, reason: &str) {
        self.failures
            .get_or_create(&FailureLabels {
                controller: controller.into(),
                reason: reason.into(),
            })
            .inc();
    }

    pub fn observe_duration(&self, controller: &str, seconds: f64) {
        self.duration
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .observe(seconds);
    }

    /// Sets the gauge of runs per phase from a full count.
    pub fn set_runs_by_phase(&self, counts: &[(RunPhase, i64)]) {
        for phase in RunPhase::ALL {
            let n = counts
                .iter()
                .find(|(p, _)| *p == phase)
                .map_or(0, |(_, n)| *n);
            self.runs_by_phase
                .get_or_create(&PhaseLabels {
                    phase: phase.as_str().into(),
                })
                .set(n);
        }
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_counters_and_phase_gauge() {
        let m = Metrics::default();
        m.reconcile_started("run");
        m.reconcile_failed("run", "Kube");
        m.set_runs_by_phase(&[(RunPhase::Running, 2)]);
        let text = m.encode().unwrap();
        assert!(
            text.contains("openwop_operator_reconciles_total{controller=\"run\"} 1"),
            "{text}"
        );
        assert!(text.contains(
            "openwop_operator_reconcile_failures_total{controller=\"run\",reason=\"Kube\"} 1"
        ));
        assert!(text.contains("openwop_operator_runs{phase=\"running\"} 2"));
        assert!(text.contains("openwop_operator_runs{phase=\"waiting-input\"} 0"));
    }
}
