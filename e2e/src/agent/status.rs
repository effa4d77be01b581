//! Pure pod-status computation from the agent's view of its containers.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The address reported as every pod's IP: this machine's first non-loopback IPv4 (pods share
/// the host network, so a process listening on 0.0.0.0 is reachable there). Loopback is the
/// fallback; Kubernetes refuses loopback endpoints, so Services then have no endpoints.
/// `OPENWOP_POD_IP` overrides the detection.
pub fn pod_ip() -> &'static str {
    static IP: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    IP.get_or_init(|| {
        if let Ok(ip) = std::env::var("OPENWOP_POD_IP")
            && ip.parse::<std::net::Ipv4Addr>().is_ok()
        {
            return ip;
        }
        std::process::Command::new("hostname")
            .arg("-I")
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|a| a.parse::<std::net::Ipv4Addr>().ok())
                    .find(|a| !a.is_loopback() && !a.is_link_local())
                    .map(|a| a.to_string())
            })
            .unwrap_or_else(|| "127.0.0.1".into())
    })
}

#[derive(Debug, Clone, PartialEq)]
pub struct Terminated {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: String,
    pub message: Option<String>,
    pub started: Timestamp,
    pub finished: Timestamp,
    pub container_id: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum State {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started: Timestamp,
        container_id: String,
    },
    Terminated(Terminated),
}

/// What the agent knows about one container.
#[derive(Debug, Clone)]
pub struct ContainerView {
    pub name: String,
    pub image: String,
    pub image_id: String,
    pub state: State,
    pub last_terminated: Option<Terminated>,
    pub restart_count: i32,
    /// False once the container finished and will not run again.
    pub will_restart: bool,
}

impl ContainerView {
    pub fn never_ran(&self) -> bool {
        matches!(self.state, State::Waiting { .. }) && self.last_terminated.is_none()
    }
    fn running(&self) -> bool {
        matches!(self.state, State::Running { .. })
    }
}

pub fn restart_allowed(policy: Option<&str>, exit_code: i32) -> bool {
    match policy.unwrap_or("Always") {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => true,
    }
}

/// kubelet's phase rules, for a pod without sidecars.
pub fn phase(init_done: bool, init_failed: bool, containers: &[ContainerView]) -> &'static str {
    if init_failed {
        return "Failed";
    }
    if !init_done || containers.iter().any(ContainerView::never_ran) {
        return "Pending";
    }
    if containers.iter().any(|c| c.running() || c.will_restart) {
        return "Running";
    }
    let all_ok = containers.iter().all(|c| match &c.state {
        State::Terminated(t) => t.exit_code == 0,
        _ => false,
    });
    if all_ok { "Succeeded" } else { "Failed" }
}

fn time(t: Timestamp) -> Time {
    Time(t)
}

fn terminated(t: &Terminated) -> ContainerStateTerminated {
    ContainerStateTerminated {
        container_id: Some(t.container_id.clone()),
        exit_code: t.exit_code,
        signal: t.signal,
        reason: Some(t.reason.clone()),
        message: t.message.clone(),
        started_at: Some(time(t.started)),
        finished_at: Some(time(t.finished)),
    }
}

pub fn container_status(c: &ContainerView) -> ContainerStatus {
    let (state, container_id) = match &c.state {
        State::Waiting { reason, message } => (
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone()),
                    message: message.clone(),
                }),
                ..Default::default()
            },
            None,
        ),
        State::Running {
            started,
            container_id,
        } => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(time(*started)),
                }),
                ..Default::default()
            },
            Some(container_id.clone()),
        ),
        State::Terminated(t) => (
            ContainerState {
                terminated: Some(terminated(t)),
                ..Default::default()
            },
            Some(t.container_id.clone()),
        ),
    };
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: c.image_id.clone(),
        container_id,
        ready: c.running(),
        started: Some(c.running()),
        restart_count: c.restart_count,
        state: Some(state),
        last_state: Some(match &c.last_terminated {
            Some(t) => ContainerState {
                terminated: Some(terminated(t)),
                ..Default::default()
            },
            None => ContainerState::default(),
        }),
        ..Default::default()
    }
}

fn condition(type_: &str, ok: bool, reason: Option<&str>, since: Timestamp) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.map(str::to_string),
        last_transition_time: Some(time(since)),
        ..Default::default()
    }
}

/// Guaranteed / Burstable / BestEffort from requests and limits (cpu and memory).
pub fn qos_class(spec: &PodSpec) -> &'static str {
    let all: Vec<_> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &all {
        let r = c.resources.clone().unwrap_or_default();
        let req = r.requests.unwrap_or_default();
        let lim = r.limits.unwrap_or_default();
        for res in ["cpu", "memory"] {
            if req.contains_key(res) || lim.contains_key(res) {
                any = true;
            }
            // Requests default to limits when only limits are set.
            match (lim.get(res), req.get(res).or(lim.get(res))) {
                (Some(l), Some(q)) if l == q => {}
                _ => guaranteed = false,
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

pub struct StatusInput<'a> {
    pub spec: &'a PodSpec,
    pub phase: &'static str,
    pub init_done: bool,
    pub sandbox_ready: bool,
    pub init: &'a [ContainerView],
    pub containers: &'a [ContainerView],
    pub start_time: Timestamp,
    /// When the pod's conditions last changed, used as their transition time.
    pub since: Timestamp,
}

pub fn pod_status(i: &StatusInput<'_>) -> PodStatus {
    let ready = i.phase == "Running" && i.containers.iter().all(ContainerView::running);
    let not_ready_reason = match i.phase {
        "Succeeded" | "Failed" => Some("PodCompleted"),
        _ if !ready => Some("ContainersNotReady"),
        _ => None,
    };
    let conditions = vec![
        condition("PodReadyToStartContainers", i.sandbox_ready, None, i.since),
        condition(
            "Initialized",
            i.init_done,
            (!i.init_done).then_some("ContainersNotInitialized"),
            i.since,
        ),
        condition("Ready", ready, not_ready_reason, i.since),
        condition("ContainersReady", ready, not_ready_reason, i.since),
        condition("PodScheduled", true, None, i.start_time),
    ];
    let ip = pod_ip().to_string();
    PodStatus {
        phase: Some(i.phase.into()),
        conditions: Some(conditions),
        host_ip: Some(ip.clone()),
        host_ips: Some(vec![HostIP { ip: ip.clone() }]),
        pod_ip: Some(ip.clone()),
        pod_ips: Some(vec![PodIP { ip }]),
        start_time: Some(time(i.start_time)),
        qos_class: Some(qos_class(i.spec).into()),
        init_container_statuses: (!i.init.is_empty())
            .then(|| i.init.iter().map(container_status).collect()),
        container_statuses: Some(i.containers.iter().map(container_status).collect()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(state: State, will_restart: bool) -> ContainerView {
        ContainerView {
            name: "c".into(),
            image: "local/sh".into(),
            image_id: "x".into(),
            state,
            last_terminated: None,
            restart_count: 0,
            will_restart,
        }
    }

    fn term(code: i32) -> State {
        State::Terminated(Terminated {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started: Timestamp::UNIX_EPOCH,
            finished: Timestamp::UNIX_EPOCH,
            container_id: "openwop://1".into(),
        })
    }

    #[test]
    fn phases() {
        let waiting = State::Waiting {
            reason: "ImageNotMapped".into(),
            message: None,
        };
        assert_eq!(phase(true, false, &[view(waiting, true)]), "Pending");
        let running = State::Running {
            started: Timestamp::UNIX_EPOCH,
            container_id: "openwop://1".into(),
        };
        assert_eq!(phase(true, false, &[view(running, true)]), "Running");
        assert_eq!(phase(true, false, &[view(term(1), false)]), "Failed");
        assert_eq!(phase(true, false, &[view(term(0), false)]), "Succeeded");
        assert_eq!(phase(false, false, &[view(term(0), false)]), "Pending");
        assert_eq!(phase(true, true, &[]), "Failed");
        let mut backoff = view(
            State::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: None,
            },
            true,
        );
        backoff.last_terminated = Some(match term(1) {
            State::Terminated(t) => t,
            _ => unreachable!(),
        });
        assert_eq!(phase(true, false, &[backoff]), "Running");
    }

    #[test]
    fn restart_policy() {
        assert!(restart_allowed(None, 0));
        assert!(restart_allowed(Some("OnFailure"), 1));
        assert!(!restart_allowed(Some("OnFailure"), 0));
        assert!(!restart_allowed(Some("Never"), 1));
    }

    #[test]
    fn qos() {
        use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let mut spec = PodSpec {
            containers: vec![Container::default()],
            ..Default::default()
        };
        assert_eq!(qos_class(&spec), "BestEffort");
        let q = |s: &str| Quantity(s.into());
        spec.containers[0].resources = Some(ResourceRequirements {
            limits: Some([("cpu".into(), q("1")), ("memory".into(), q("1Gi"))].into()),
            ..Default::default()
        });
        assert_eq!(qos_class(&spec), "Guaranteed");
        spec.containers[0].resources = Some(ResourceRequirements {
            requests: Some([("cpu".into(), q("1"))].into()),
            ..Default::default()
        });
        assert_eq!(qos_class(&spec), "Burstable");
    }
}
