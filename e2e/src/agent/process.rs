//! Turning a container spec into a local process: argv, environment, signals.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVar, Pod, Secret};
use kube::{Api, Client};

use super::config::ImageMapping;

#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error("key {key:?} not found in {kind} {namespace}/{name}")]
    KeyNotFound {
        kind: &'static str,
        namespace: String,
        name: String,
        key: String,
    },
    #[error("cannot read {kind} {namespace}/{name}: {source}")]
    Api {
        kind: &'static str,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("env {var}: unsupported fieldRef {path:?}")]
    UnsupportedField { var: String, path: String },
    #[error("env {var}: resourceFieldRef is not supported by the node agent")]
    UnsupportedResourceField { var: String },
    #[error("env {var}: valueFrom has no source")]
    EmptySource { var: String },
}

/// The argv of a container, docker-style: `command` replaces the image ENTRYPOINT, `args`
/// replaces the image CMD. `$(VAR)` references are expanded from the container's env, and the
/// program is rewritten through the mapping's `paths`.
pub fn argv(
    container: &Container,
    mapping: &ImageMapping,
    env: &BTreeMap<String, String>,
) -> Vec<String> {
    let command = container.command.clone().filter(|c| !c.is_empty());
    let args = container.args.clone();
    let mut argv: Vec<String> = match (command, args) {
        (Some(cmd), args) => {
            let mut v = cmd;
            v.extend(args.unwrap_or_default());
            v
        }
        (None, Some(args)) => {
            let mut v = mapping.entrypoint.clone();
            v.extend(args);
            v
        }
        (None, None) => {
            let mut v = mapping.entrypoint.clone();
            v.extend(mapping.cmd.clone());
            v
        }
    };
    for a in argv.iter_mut() {
        *a = expand_dollar_refs(a, env);
    }
    if let Some(first) = argv.first_mut()
        && let Some(host) = mapping.paths.get(first.as_str())
    {
        *first = host.clone();
    }
    argv
}

/// Kubernetes `$(VAR)` expansion: known variables are replaced, `$$` escapes, unknown
/// references are left as written.
pub fn expand_dollar_refs(s: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some((_, '$')) => {
                out.push('$');
                chars.next();
            }
            Some((_, '(')) => {
                let rest = &s[i + 2..];
                match rest.find(')') {
                    Some(end) => {
                        let name = &rest[..end];
                        match env.get(name) {
                            Some(v) => out.push_str(v),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        // Skip "(name)".
                        for _ in 0..name.chars().count() + 2 {
                            chars.next();
                        }
                    }
                    None => out.push('$'),
                }
            }
            _ => out.push('$'),
        }
    }
    out
}

/// Reads a field of the pod for `valueFrom.fieldRef`.
pub fn pod_field(pod: &Pod, var: &str, path: &str) -> Result<String, EnvError> {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let bracket = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("']"))
            .map(str::to_string)
    };
    let v = match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        // Every pod on this node shares the host's loopback address.
        "status.podIP" | "status.hostIP" | "status.podIPs" | "status.hostIPs" => {
            super::status::pod_ip().into()
        }
        _ => {
            if let Some(k) = bracket("metadata.labels['") {
                m.labels
                    .as_ref()
                    .and_then(|l| l.get(&k).cloned())
                    .unwrap_or_default()
            } else if let Some(k) = bracket("metadata.annotations['") {
                m.annotations
                    .as_ref()
                    .and_then(|l| l.get(&k).cloned())
                    .unwrap_or_default()
            } else {
                return Err(EnvError::UnsupportedField {
                    var: var.into(),
                    path: path.into(),
                });
            }
        }
    };
    Ok(v)
}

async fn get_secret(client: &Client, ns: &str, name: &str) -> Result<Option<Secret>, EnvError> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|source| EnvError::Api {
            kind: "Secret",
            namespace: ns.into(),
            name: name.into(),
            source: Box::new(source),
        })
}

async fn get_config_map(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Option<ConfigMap>, EnvError> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|source| EnvError::Api {
            kind: "ConfigMap",
            namespace: ns.into(),
            name: name.into(),
            source: Box::new(source),
        })
}

fn secret_data(s: &Secret) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    for (k, v) in s.string_data.iter().flatten() {
        out.insert(k.clone(), v.clone());
    }
    out
}

fn config_map_data(c: &ConfigMap) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = c.data.clone().unwrap_or_default();
    for (k, v) in c.binary_data.iter().flatten() {
        out.insert(k.clone(), String::from_utf8_lossy(&v.0).into_owned());
    }
    out
}

/// The container's environment, kubelet order: `envFrom` first, then `env` (later wins), each
/// value `$(VAR)`-expanded against what is defined before it. `base` (service variables,
/// image ENV) comes first and can be overridden.
pub async fn container_env(
    client: &Client,
    pod: &Pod,
    container: &Container,
    base: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, EnvError> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut env = base;
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.secret_ref {
            match get_secret(client, &ns, &r.name).await? {
                Some(s) => {
                    for (k, v) in secret_data(&s) {
                        env.insert(format!("{prefix}{k}"), v);
                    }
                }
                None if r.optional == Some(true) => {}
                None => {
                    return Err(EnvError::NotFound {
                        kind: "Secret",
                        namespace: ns,
                        name: r.name.clone(),
                    });
                }
            }
        }
        if let Some(r) = &from.config_map_ref {
            match get_config_map(client, &ns, &r.name).await? {
                Some(c) => {
                    for (k, v) in config_map_data(&c) {
                        env.insert(format!("{prefix}{k}"), v);
                    }
                }
                None if r.optional == Some(true) => {}
                None => {
                    return Err(EnvError::NotFound {
                        kind: "ConfigMap",
                        namespace: ns,
                        name: r.name.clone(),
                    });
                }
            }
        }
    }
    for var in container.env.iter().flatten() {
        if let Some(v) = env_value(client, pod, &ns, var, &env).await? {
            env.insert(var.name.clone(), v);
        }
    }
    Ok(env)
}

async fn env_value(
    client: &Client,
    pod: &Pod,
    ns: &str,
    var: &EnvVar,
    env: &BTreeMap<String, String>,
) -> Result<Option<String>, EnvError> {
    let Some(from) = &var.value_from else {
        return Ok(Some(expand_dollar_refs(
            var.value.as_deref().unwrap_or(""),
            env,
        )));
    };
    if let Some(f) = &from.field_ref {
        return pod_field(pod, &var.name, &f.field_path).map(Some);
    }
    if let Some(r) = &from.secret_key_ref {
        let optional = r.optional == Some(true);
        return match get_secret(client, ns, &r.name).await? {
            Some(s) => match secret_data(&s).remove(&r.key) {
                Some(v) => Ok(Some(v)),
                None if optional => Ok(None),
                None => Err(EnvError::KeyNotFound {
                    kind: "Secret",
                    namespace: ns.into(),
                    name: r.name.clone(),
                    key: r.key.clone(),
                }),
            },
            None if optional => Ok(None),
            None => Err(EnvError::NotFound {
                kind: "Secret",
                namespace: ns.into(),
                name: r.name.clone(),
            }),
        };
    }
    if let Some(r) = &from.config_map_key_ref {
        let optional = r.optional == Some(true);
        return match get_config_map(client, ns, &r.name).await? {
            Some(c) => match config_map_data(&c).remove(&r.key) {
                Some(v) => Ok(Some(v)),
                None if optional => Ok(None),
                None => Err(EnvError::KeyNotFound {
                    kind: "ConfigMap",
                    namespace: ns.into(),
                    name: r.name.clone(),
                    key: r.key.clone(),
                }),
            },
            None if optional => Ok(None),
            None => Err(EnvError::NotFound {
                kind: "ConfigMap",
                namespace: ns.into(),
                name: r.name.clone(),
            }),
        };
    }
    if from.resource_field_ref.is_some() {
        return Err(EnvError::UnsupportedResourceField {
            var: var.name.clone(),
        });
    }
    Err(EnvError::EmptySource {
        var: var.name.clone(),
    })
}

/// Whether `program` can be executed: a path must be an executable file; a bare name is
/// looked up on `path_var` like execvp does.
pub fn program_exists(program: &str, path_var: Option<&str>) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        return executable(Path::new(program));
    }
    path_var
        .unwrap_or("/usr/local/bin:/usr/bin:/bin")
        .split(':')
        .any(|dir| executable(&Path::new(dir).join(program)))
}

/// Sends `signal` to the process group led by `pgid` (every container runs in its own group,
/// so shells and their children stop together).
pub fn signal_group(pgid: i32, signal: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) has no memory-safety preconditions; a negative pid addresses a group.
    let rc = unsafe { libc::kill(-pgid, signal) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!(pgid, signal, %err, "cannot signal process group");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn dollar_refs() {
        let e = env(&[("A", "1"), ("B", "two")]);
        assert_eq!(expand_dollar_refs("x$(A)y$(B)", &e), "x1ytwo");
        assert_eq!(expand_dollar_refs("$(C)", &e), "$(C)");
        assert_eq!(expand_dollar_refs("$$(A)", &e), "$(A)");
        assert_eq!(expand_dollar_refs("cost $5 $(", &e), "cost $5 $(");
    }

    fn mapping() -> ImageMapping {
        ImageMapping {
            image: "x".into(),
            entrypoint: vec!["/ep".into()],
            cmd: vec!["--default".into()],
            paths: [("/ep".to_string(), "/host/ep".to_string())].into(),
            env: BTreeMap::new(),
        }
    }

    #[test]
    fn argv_follows_docker_semantics() {
        let m = mapping();
        let e = env(&[("N", "7")]);
        let c = Container::default();
        assert_eq!(argv(&c, &m, &e), vec!["/host/ep", "--default"]);
        let c = Container {
            args: Some(vec!["--n=$(N)".into()]),
            ..Default::default()
        };
        assert_eq!(argv(&c, &m, &e), vec!["/host/ep", "--n=7"]);
        let c = Container {
            command: Some(vec!["sh".into(), "-c".into()]),
            args: Some(vec!["exit 1".into()]),
            ..Default::default()
        };
        assert_eq!(argv(&c, &m, &e), vec!["sh", "-c", "exit 1"]);
    }

    #[test]
    fn program_lookup() {
        assert!(program_exists("sh", Some("/usr/bin:/bin")));
        assert!(program_exists("/bin/sh", None));
        assert!(!program_exists("/nonexistent/openwop", None));
        assert!(!program_exists("openwop-no-such-program", Some("/bin")));
    }

    #[test]
    fn field_refs() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.labels = Some([("app".to_string(), "a".to_string())].into());
        assert_eq!(pod_field(&pod, "V", "metadata.name").unwrap(), "p");
        assert_eq!(pod_field(&pod, "V", "metadata.namespace").unwrap(), "ns");
        assert_eq!(pod_field(&pod, "V", "metadata.labels['app']").unwrap(), "a");
        assert!(pod_field(&pod, "V", "spec.nope").is_err());
    }
}
