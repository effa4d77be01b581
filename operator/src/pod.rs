//! The worker Pod of a Run: a pure function of the Run, its workflow's Kubernetes-side settings
//! and the operator config.

use openwop_protocol::run::env::{self as run_env, WorkerEnv};
use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    KeyToPath, Pod, PodSecurityContext, PodSpec, SeccompProfile, Secret, SecretKeySelector,
    SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use openwop_crds::{
    CredentialMount, ProviderCredential, Run, SecretKeyRef, WorkerOverrides, WorkflowSecret,
    WorkflowSpec,
};

use openwop_protocol::run::subjects::events_subject;

use crate::config::OperatorConfig;
use crate::names::{
    APP_NAME, LABEL_ATTEMPT, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NAME, MANAGER,
    NATS_CREDENTIALS_COMPONENT, owner_ref, pod_name, run_labels, snapshot_name,
};

pub use run_env::{
    NATS_CREDENTIALS_MOUNT, PROVIDERS_DIR, SNAPSHOT_DIR, TOOL_HEADERS_DIR, WORKFLOW_SECRETS_DIR,
};

/// The Kubernetes-side inputs of a worker pod taken from the Workflow.
#[derive(Debug, Clone, Default)]
pub struct WorkerInputs<'a> {
    pub providers: &'a [ProviderCredential],
    /// The Workflow's `spec.secrets` (the HTTP node's header secrets), mounted as files.
    pub secrets: &'a [WorkflowSecret],
    /// The run's tool-credentials Secret, when its LLM nodes name ToolServers: mounted
    /// optional (it exists only when a server has `headersFrom`).
    pub tool_headers: Option<String>,
    pub overrides: Option<&'a WorkerOverrides>,
}

/// The provider credentials the worker of `run` needs. All of them, except under
/// `spec.providerMocks`: a provider that no unmocked node names is left out, so a fully
/// mocked run needs no Secret (the worker builds only the providers unmocked nodes name).
/// An unmocked `core.ai.*` node without `config.provider` uses the first configured
/// provider, so then every credential stays.
pub fn needed_credentials(run: &Run, workflow: &WorkflowSpec) -> Vec<ProviderCredential> {
    let mocks = &run.spec.provider_mocks;
    if mocks.is_empty() {
        return workflow.providers.clone();
    }
    let unmocked = || workflow.nodes.iter().filter(|n| !mocks.contains_key(&n.id));
    let provider_of = |n: &openwop_crds::WorkflowNode| {
        n.config
            .as_ref()
            .and_then(|c| c.get("provider"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    if unmocked().any(|n| n.type_id.starts_with("core.ai.") && provider_of(n).is_none()) {
        return workflow.providers.clone();
    }
    let named: std::collections::BTreeSet<String> = unmocked().filter_map(provider_of).collect();
    workflow
        .providers
        .iter()
        .filter(|p| named.contains(&p.provider))
        .cloned()
        .collect()
}

/// A volume `name` holding one key of a Secret as a file readable only by the worker, mounted
/// read-only at `dir` (the file is `<dir>/<key>`).
fn secret_key_file(name: String, r: &SecretKeyRef, dir: String) -> (Volume, VolumeMount) {
    let volume = Volume {
        name: name.clone(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(r.name.clone()),
            items: Some(vec![KeyToPath {
                key: r.key.clone(),
                path: r.key.clone(),
                mode: Some(0o400),
            }]),
            default_mode: Some(0o400),
            optional: Some(false),
        }),
        ..Default::default()
    };
    let mount = VolumeMount {
        name,
        mount_path: dir,
        read_only: Some(true),
        ..Default::default()
    };
    (volume, mount)
}

/// The copy of the NATS credentials kept in `namespace` for worker pods: exactly the files
/// of `data` (the recognised keys of `openwop_nats::KEYS`), nothing else.
pub fn nats_credentials_secret(
    name: &str,
    namespace: &str,
    data: BTreeMap<String, String>,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([
                (LABEL_COMPONENT.into(), NATS_CREDENTIALS_COMPONENT.into()),
                (LABEL_MANAGED_BY.into(), MANAGER.into()),
                (LABEL_NAME.into(), APP_NAME.into()),
            ])),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(
            data.into_iter()
                .filter(|(k, _)| openwop_nats::KEYS.contains(&k.as_str()))
                .map(|(k, v)| (k, ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// The worker's environment: the run contract's [`WorkerEnv`] for this run and attempt, and
/// each configured provider's API root.
fn worker_env(run: &Run, cfg: &OperatorConfig, attempt: u32) -> Vec<EnvVar> {
    let name = run.name_any();
    let namespace = run.namespace().unwrap_or_default();
    let run_id = run.uid().unwrap_or_default();
    let stream = cfg.stream_spec();
    let mut worker_env = WorkerEnv {
        run_namespace: Some(namespace.clone()),
        run_name: Some(name.clone()),
        // Keyed by the runId: a Run re-created under the same name gets a new subject.
        events_subject: Some(events_subject(&namespace, &run_id)),
        run_id: Some(run_id),
        attempt: Some(attempt),
        snapshot: run_env::snapshot_path(),
        nats_url: cfg.worker.nats_url.clone(),
        nats_credentials_dir: (!cfg.nats_credentials.dir.is_empty())
            .then(|| NATS_CREDENTIALS_MOUNT.to_owned()),
        // The worker's ensure_stream uses the operator's StreamSpec.
        events_stream: stream.name.clone(),
        events_max_age: stream.max_age,
        otlp_endpoint: Some(cfg.worker.otlp_endpoint.clone()).filter(|u| !u.is_empty()),
        testing: run_env::TestingEnv {
            otel_scrape_endpoint: crate::config::seams::span_ingest_traces_url(cfg),
            fault_pause_at_sequence: None,
        },
        ..WorkerEnv::default()
    };
    // The API root of each configured provider that has one (openai-compatible needs it).
    for p in &cfg.providers {
        if let Some(url) = &p.base_url {
            worker_env.set_provider_base_url(&p.name, url.clone());
        }
    }
    worker_env
        .to_env_vars()
        .into_iter()
        .map(|(name, value)| EnvVar {
            name,
            value: Some(value),
            ..Default::default()
        })
        .collect()
}

/// The volumes every worker mounts: its snapshot (read-only), a small `/tmp`, and the NATS
/// credentials copy when there is one.
fn base_volumes(name: &str, cfg: &OperatorConfig) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut volumes = vec![
        Volume {
            name: "snapshot".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: snapshot_name(name),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity("64Mi".into())),
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    let mut mounts = vec![
        VolumeMount {
            name: "snapshot".into(),
            mount_path: SNAPSHOT_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        },
        VolumeMount {
            name: "tmp".into(),
            mount_path: "/tmp".into(),
            ..Default::default()
        },
    ];
    if !cfg.nats_credentials.dir.is_empty() {
        volumes.push(Volume {
            name: "nats-credentials".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(cfg.nats_credentials.worker_secret.clone()),
                default_mode: Some(0o400),
                optional: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: "nats-credentials".into(),
            mount_path: NATS_CREDENTIALS_MOUNT.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    (volumes, mounts)
}

/// The Workflow's provider credentials (as env from Secrets, or files) and its secrets (files).
fn mount_inputs(
    inputs: &WorkerInputs<'_>,
    env: &mut Vec<EnvVar>,
    volumes: &mut Vec<Volume>,
    mounts: &mut Vec<VolumeMount>,
) {
    for (i, p) in inputs.providers.iter().enumerate() {
        match p.mount_as {
            CredentialMount::Env => env.push(EnvVar {
                name: p.env_name.clone().unwrap_or_default(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: p.secret_ref.name.clone(),
                        key: p.secret_ref.key.clone(),
                        optional: Some(false),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            CredentialMount::File => {
                let (v, m) = secret_key_file(
                    format!("provider-{i}"),
                    &p.secret_ref,
                    format!("{PROVIDERS_DIR}/{}", p.provider),
                );
                volumes.push(v);
                mounts.push(m);
            }
        }
    }
    for (i, s) in inputs.secrets.iter().enumerate() {
        let (v, m) = secret_key_file(
            format!("workflow-secret-{i}"),
            &s.secret_ref,
            format!("{WORKFLOW_SECRETS_DIR}/{}", s.name),
        );
        volumes.push(v);
        mounts.push(m);
    }
    if let Some(secret) = &inputs.tool_headers {
        volumes.push(Volume {
            name: "tool-headers".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.clone()),
                default_mode: Some(0o400),
                optional: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: "tool-headers".into(),
            mount_path: TOOL_HEADERS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
}

/// The worker container: restricted, read-only root, the Workflow's resources when it
/// overrides them.
fn worker_container(
    cfg: &OperatorConfig,
    overrides: Option<&WorkerOverrides>,
    env: Vec<EnvVar>,
    mounts: Vec<VolumeMount>,
) -> Container {
    let resources = overrides
        .and_then(|o| o.resources.clone())
        .unwrap_or_else(|| cfg.worker.resources.clone());

    Container {
        name: "worker".into(),
        image: Some(cfg.worker.image.clone()),
        image_pull_policy: Some(cfg.worker.image_pull_policy.clone()),
        env: Some(env),
        volume_mounts: Some(mounts),
        resources: Some(resources),
        // A worker that dies without writing its summary leaves its log tail there, so the
        // crash reason reaches the Run's Events and status after the pod is gone.
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Builds attempt `attempt` (1-based) of the worker pod of `run`.
pub fn worker_pod(run: &Run, inputs: &WorkerInputs<'_>, cfg: &OperatorConfig, attempt: u32) -> Pod {
    let name = run.name_any();
    let namespace = run.namespace().unwrap_or_default();
    let mut labels = run_labels(run);
    labels.insert(LABEL_ATTEMPT.into(), attempt.to_string());
    let mut env = worker_env(run, cfg, attempt);
    let (mut volumes, mut mounts) = base_volumes(&name, cfg);
    mount_inputs(inputs, &mut env, &mut volumes, &mut mounts);
    let overrides = inputs.overrides;
    let service_account = overrides
        .and_then(|o| o.service_account_name.clone())
        .unwrap_or_else(|| cfg.worker.service_account_name.clone());
    let container = worker_container(cfg, overrides, env, mounts);

    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(&name, attempt)),
            namespace: Some(namespace),
            labels: Some(labels),
            owner_references: Some(vec![owner_ref(run)]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![container],
            restart_policy: Some("Never".into()),
            service_account_name: Some(service_account),
            // The worker talks to NATS only; it needs no Kubernetes API token.
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            active_deadline_seconds: run.spec.timeout_seconds,
            node_selector: overrides.and_then(|o| o.node_selector.clone()),
            tolerations: overrides.and_then(|o| o.tolerations.clone()),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(cfg.worker.run_as_user),
                run_as_group: Some(cfg.worker.run_as_user),
                fs_group: Some(cfg.worker.run_as_user),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                ..Default::default()
            }),
            volumes: Some(volumes),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{LABEL_RUN, owned_by};
    use openwop_crds::{RunSpec, WorkflowRef};
    use serde_json::json;

    fn run() -> Run {
        let mut r = Run::new(
            "triage-1",
            RunSpec {
                workflow_ref: WorkflowRef {
                    name: Some("triage".into()),
                    id: None,
                },
                inputs: None,
                configurable: None,
                timeout_seconds: Some(600),
                answers: vec![],
                cancel: None,
                pause: None,
                provider_mocks: Default::default(),
            },
        );
        r.metadata.namespace = Some("team-a".into());
        r.metadata.uid = Some("uid-123".into());
        r
    }

    #[test]
    fn configured_provider_base_urls_reach_the_worker() {
        let cfg = OperatorConfig {
            providers: serde_yaml::from_str(
            "- {name: local-llm, vendor: openai-compatible, baseUrl: 'http://vllm:8000/v1'}\n- {name: openai, vendor: openai}",
        )
        .unwrap(),
            ..Default::default()
        };
        let run = Run::new(
            "r1",
            serde_json::from_value(serde_json::json!({"workflowRef": {"name": "wf"}})).unwrap(),
        );
        let pod = worker_pod(&run, &WorkerInputs::default(), &cfg, 1);
        let env = pod.spec.unwrap().containers[0].env.clone().unwrap();
        let urls: Vec<(String, Option<String>)> = env
            .into_iter()
            .filter(|e| e.name.ends_with("_BASE_URL"))
            .map(|e| (e.name, e.value))
            .collect();
        assert_eq!(
            urls,
            [(
                "OPENWOP_PROVIDER_LOCAL_LLM_BASE_URL".to_string(),
                Some("http://vllm:8000/v1".to_string())
            )]
        );
    }

    #[test]
    fn the_pod_env_is_the_worker_env_and_the_snapshot_is_read_where_it_is_mounted() {
        let pod = worker_pod(
            &run(),
            &WorkerInputs::default(),
            &OperatorConfig::default(),
            2,
        );
        let c = &pod.spec.unwrap().containers[0];
        let vars = c
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()));
        let env = WorkerEnv::from_vars(vars).unwrap();
        assert_eq!(
            (env.run_id.as_deref(), env.run_name.as_deref(), env.attempt),
            (Some("uid-123"), Some("triage-1"), Some(2))
        );
        assert_eq!(env.testing, run_env::TestingEnv::default());
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == "snapshot")
            .unwrap();
        assert_eq!(
            env.snapshot,
            format!("{}/{}", mount.mount_path, crate::snapshot::SNAPSHOT_KEY)
        );
    }

    #[test]
    fn security_context_is_restricted() {
        let pod = worker_pod(
            &run(),
            &WorkerInputs::default(),
            &OperatorConfig::default(),
            1,
        );
        let spec = pod.spec.unwrap();
        let v = serde_json::to_value(&spec).unwrap();
        assert_eq!(
            v["securityContext"],
            json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                   "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}})
        );
        assert_eq!(
            v["containers"][0]["securityContext"],
            json!({"allowPrivilegeEscalation": false, "privileged": false,
                   "readOnlyRootFilesystem": true, "runAsNonRoot": true,
                   "capabilities": {"drop": ["ALL"]},
                   "seccompProfile": {"type": "RuntimeDefault"}})
        );
        assert_eq!(v["automountServiceAccountToken"], json!(false));
        assert_eq!(v["serviceAccountName"], json!("openwop-worker"));
        assert_eq!(v["restartPolicy"], json!("Never"));
        assert_eq!(v["activeDeadlineSeconds"], json!(600));
        assert_eq!(
            v["containers"][0]["resources"]["limits"]["memory"],
            json!("512Mi")
        );
    }

    #[test]
    fn nats_credentials_are_mounted_only_when_configured() {
        let mount_of = |cfg: &OperatorConfig| {
            let pod =
                serde_json::to_value(worker_pod(&run(), &WorkerInputs::default(), cfg, 1)).unwrap();
            let named = |list: &serde_json::Value, name: &str| {
                list.as_array()
                    .unwrap()
                    .iter()
                    .find(|item| item["name"] == name)
                    .cloned()
            };
            let c = &pod["spec"]["containers"][0];
            (
                named(&pod["spec"]["volumes"], "nats-credentials"),
                named(&c["volumeMounts"], "nats-credentials"),
                named(&c["env"], run_env::NATS_CREDENTIALS_DIR),
            )
        };
        assert_eq!(
            mount_of(&OperatorConfig::default()),
            (None, None, None),
            "NATS without authentication: nothing mounted"
        );
        let mut cfg = OperatorConfig::default();
        cfg.nats_credentials.dir = "/var/run/openwop/nats".into();
        let (vol, mount, env) = mount_of(&cfg);
        assert_eq!(
            vol.unwrap()["secret"],
            json!({"secretName": "openwop-nats-credentials", "defaultMode": 0o400, "optional": false})
        );
        assert_eq!(
            mount.unwrap(),
            json!({"name": "nats-credentials", "mountPath": NATS_CREDENTIALS_MOUNT, "readOnly": true})
        );
        assert_eq!(env.unwrap()["value"], NATS_CREDENTIALS_MOUNT);
    }

    #[test]
    fn nats_credentials_copy_holds_only_recognised_keys() {
        let data = BTreeMap::from([
            ("username".to_string(), "ops".to_string()),
            ("password".to_string(), "pw".to_string()),
            ("ca.crt".to_string(), "not copied".to_string()),
        ]);
        let s = serde_json::to_value(nats_credentials_secret(
            "openwop-nats-credentials",
            "team-a",
            data,
        ))
        .unwrap();
        assert_eq!(s["kind"], "Secret");
        assert_eq!(s["metadata"]["namespace"], "team-a");
        assert_eq!(
            s["metadata"]["labels"][LABEL_COMPONENT],
            NATS_CREDENTIALS_COMPONENT
        );
        assert_eq!(s["metadata"]["labels"][LABEL_MANAGED_BY], MANAGER);
        assert_eq!(s["type"], "Opaque");
        assert_eq!(
            s["data"],
            json!({"password": "cHc=", "username": "b3Bz"}),
            "base64 of exactly the recognised keys"
        );
    }

    #[test]
    fn objects_of_a_deleted_run_of_the_same_name_are_not_ours() {
        let r = run();
        let pod = worker_pod(&r, &WorkerInputs::default(), &OperatorConfig::default(), 1);
        assert!(owned_by(&pod.metadata, &r));
        // Same name, new object: a new uid.
        let mut again = run();
        again.metadata.uid = Some("another-uid".into());
        assert!(!owned_by(&pod.metadata, &again));
        assert!(!owned_by(&ObjectMeta::default(), &r));
    }

    #[test]
    fn pod_is_owned_by_run_and_labelled() {
        let pod = worker_pod(
            &run(),
            &WorkerInputs::default(),
            &OperatorConfig::default(),
            2,
        );
        assert_eq!(pod.metadata.name.as_deref(), Some("triage-1-w2"));
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Run", "uid-123")
        );
        assert_eq!(owner.controller, Some(true));
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels[LABEL_RUN], "triage-1");
        assert_eq!(labels[LABEL_ATTEMPT], "2");
        let env = serde_json::to_value(&pod.spec.unwrap().containers[0].env).unwrap();
        let env = env.as_array().unwrap();
        assert!(
            env.contains(
                &json!({"name": "OPENWOP_EVENTS_SUBJECT", "value": "openwop.events.team-a.uid-123"})
            ),
            "the subject is keyed by the runId (uid), not the name"
        );
        assert!(
            env.contains(&json!({"name": "OPENWOP_EVENTS_MAX_AGE_SECONDS", "value": "604800"}))
        );
        assert!(env.contains(&json!({"name": "OPENWOP_EVENTS_STREAM", "value": "OPENWOP_EVENTS"})));
    }

    #[test]
    fn workflow_secrets_are_mounted_read_only_by_name() {
        let secrets = vec![WorkflowSecret {
            name: "ticketing-token".into(),
            secret_ref: SecretKeyRef {
                name: "ticketing".into(),
                key: "token".into(),
            },
        }];
        let inputs = WorkerInputs {
            providers: &[],
            secrets: &secrets,
            tool_headers: Some("triage-1-tool-headers".into()),
            overrides: None,
        };
        let pod = worker_pod(&run(), &inputs, &OperatorConfig::default(), 1);
        let v = serde_json::to_value(pod.spec.unwrap()).unwrap();
        let mounts = v["containers"][0]["volumeMounts"].as_array().unwrap();
        let m = mounts
            .iter()
            .find(|m| m["name"] == "workflow-secret-0")
            .unwrap();
        assert_eq!(
            (m["mountPath"].as_str(), m["readOnly"].as_bool()),
            (
                Some("/var/run/openwop/workflow-secrets/ticketing-token"),
                Some(true)
            )
        );
        let vol = v["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == "workflow-secret-0")
            .unwrap();
        assert_eq!(
            vol["secret"],
            json!({"secretName": "ticketing", "defaultMode": 0o400, "optional": false,
                   "items": [{"key": "token", "path": "token", "mode": 0o400}]})
        );
        assert!(
            !v.to_string().contains("\"value\":\"tok"),
            "no inline value"
        );
        // The run's tool credentials: optional (only servers with headers have a copy).
        let vol = v["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == "tool-headers")
            .unwrap();
        assert_eq!(
            vol["secret"],
            json!({"secretName": "triage-1-tool-headers", "defaultMode": 0o400, "optional": true})
        );
        assert!(mounts.iter().any(|m| m["name"] == "tool-headers"
            && m["mountPath"] == TOOL_HEADERS_DIR
            && m["readOnly"] == true));
    }

    #[test]
    fn provider_keys_come_from_secrets_never_inline() {
        let providers = vec![
            ProviderCredential {
                provider: "openai".into(),
                secret_ref: SecretKeyRef {
                    name: "llm".into(),
                    key: "openai".into(),
                },
                mount_as: CredentialMount::File,
                env_name: None,
            },
            ProviderCredential {
                provider: "anthropic".into(),
                secret_ref: SecretKeyRef {
                    name: "llm".into(),
                    key: "anthropic".into(),
                },
                mount_as: CredentialMount::Env,
                env_name: Some("ANTHROPIC_API_KEY".into()),
            },
        ];
        let inputs = WorkerInputs {
            providers: &providers,
            secrets: &[],
            tool_headers: None,
            overrides: None,
        };
        let pod = worker_pod(&run(), &inputs, &OperatorConfig::default(), 1);
        let v = serde_json::to_value(pod.spec.unwrap()).unwrap();
        let env = v["containers"][0]["env"].as_array().unwrap();
        let key = env
            .iter()
            .find(|e| e["name"] == "ANTHROPIC_API_KEY")
            .unwrap();
        assert_eq!(
            key["valueFrom"]["secretKeyRef"],
            json!({"name": "llm", "key": "anthropic", "optional": false})
        );
        assert!(key.get("value").is_none());
        let mounts = v["containers"][0]["volumeMounts"].as_array().unwrap();
        assert!(mounts.iter().any(
            |m| m["mountPath"] == "/var/run/openwop/providers/openai" && m["readOnly"] == true
        ));
        let vol = v["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == "provider-0")
            .unwrap();
        assert_eq!(vol["secret"]["secretName"], "llm");
        assert_eq!(vol["secret"]["defaultMode"], 0o400);
    }

    #[test]
    fn mocked_nodes_need_no_credentials_of_their_providers() {
        let cred = |provider: &str| ProviderCredential {
            provider: provider.into(),
            secret_ref: SecretKeyRef {
                name: "llm".into(),
                key: provider.into(),
            },
            mount_as: CredentialMount::File,
            env_name: None,
        };
        let spec: WorkflowSpec = serde_json::from_value(json!({
            "id": "wf", "name": "wf", "version": "1.0.0",
            "nodes": [
                {"id": "a", "typeId": "core.ai.callPrompt", "config": {"provider": "openai"}},
                {"id": "b", "typeId": "core.ai.callPrompt", "config": {"provider": "anthropic"}},
                {"id": "c", "typeId": "core.identity"}
            ],
            "edges": []
        }))
        .unwrap();
        let spec = WorkflowSpec {
            providers: vec![cred("openai"), cred("anthropic")],
            ..spec
        };
        let names = |r: &Run| -> Vec<String> {
            needed_credentials(r, &spec)
                .into_iter()
                .map(|p| p.provider)
                .collect()
        };
        let mut r = run();
        assert_eq!(names(&r), ["openai", "anthropic"], "no mocks: all of them");
        r.spec.provider_mocks = serde_json::from_value(json!({
            "a": {"responses": [{"stopReason": "end_turn", "content": "{}"}]}
        }))
        .unwrap();
        assert_eq!(names(&r), ["anthropic"], "openai is named only by mocked a");
        r.spec.provider_mocks = serde_json::from_value(json!({
            "a": {"responses": [{"stopReason": "end_turn", "content": "{}"}]},
            "b": {"responses": [{"stopReason": "end_turn", "content": "{}"}]}
        }))
        .unwrap();
        assert!(names(&r).is_empty(), "fully mocked: no Secret needed");
        let inputs = WorkerInputs {
            providers: &needed_credentials(&r, &spec),
            secrets: &[],
            tool_headers: None,
            overrides: None,
        };
        let pod =
            serde_json::to_value(worker_pod(&r, &inputs, &OperatorConfig::default(), 1)).unwrap();
        assert!(!pod.to_string().contains("\"secretName\""), "{pod}");
        // An unmocked AI node without a provider falls back to the first one: keep all.
        let mut fallback = spec.clone();
        fallback.nodes[2].type_id = "core.ai.callPrompt".into();
        assert_eq!(needed_credentials(&r, &fallback).len(), 2);
    }

    #[test]
    fn overrides_replace_resources_and_service_account() {
        let o = WorkerOverrides {
            service_account_name: Some("custom".into()),
            node_selector: Some(BTreeMap::from([("pool".into(), "ai".into())])),
            ..Default::default()
        };
        let inputs = WorkerInputs {
            providers: &[],
            secrets: &[],
            tool_headers: None,
            overrides: Some(&o),
        };
        let spec = worker_pod(&run(), &inputs, &OperatorConfig::default(), 1)
            .spec
            .unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("custom"));
        assert_eq!(spec.node_selector.unwrap()["pool"], "ai");
    }
}
