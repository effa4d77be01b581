//! Pod volumes. Each volume is materialised under `<pod dir>/volumes/<name>/` (ConfigMap,
//! Secret, downward API and projected contents written the kubelet's atomic way: a timestamped
//! `..<n>` directory, a `..data` symlink swapped by rename, and one `<key> -> ..data/<key>`
//! symlink per top-level entry), then each container process enters its own private mount
//! namespace in which every volume directory is bind-mounted onto its `mountPath`.
//!
//! Mountpoints that do not exist are created on the host (they stay empty there: the mounts
//! live only in the container's namespace).

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccount, Volume,
};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use tokio::time::Instant;

use super::process;

/// The kubelet's default file mode for ConfigMap, Secret, downward API and projected files.
const DEFAULT_MODE: u32 = 0o644;
/// Projected service-account tokens without `expirationSeconds` live this long.
const DEFAULT_TOKEN_SECONDS: i64 = 3600;
/// Termination messages are cut at this size, as the kubelet does.
pub const TERMINATION_MESSAGE_MAX: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("volume {volume:?}: {kind} {namespace}/{name} not found")]
    NotFound {
        volume: String,
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error("volume {volume:?}: key {key:?} not found in {kind} {namespace}/{name}")]
    KeyNotFound {
        volume: String,
        kind: &'static str,
        namespace: String,
        name: String,
        key: String,
    },
    #[error("volume {volume:?}: cannot read {kind} {namespace}/{name}: {source}")]
    Api {
        volume: String,
        kind: &'static str,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("volume {volume:?}: cannot request a token for service account {sa}: {message}")]
    Token {
        volume: String,
        sa: String,
        message: String,
    },
    #[error(
        "volume {volume:?}: {what} volumes are not supported by the node agent (supported: configMap, secret, emptyDir, projected, downwardAPI)"
    )]
    Unsupported { volume: String, what: String },
    #[error("volume {volume:?}: {what}")]
    Invalid { volume: String, what: String },
    #[error("volume {volume:?}: cannot write {path}: {source}")]
    Io {
        volume: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("container {container:?}: volumeMount {mount_path:?}: {what}")]
    Mount {
        container: String,
        mount_path: String,
        what: String,
    },
}

/// File contents of one volume: relative path → (bytes, mode).
type Files = BTreeMap<String, (Vec<u8>, u32)>;

/// A bind mount to make inside a container's mount namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}

/// The volumes of one pod and what was last written into them.
pub struct VolumeSet {
    dir: PathBuf,
    written: HashMap<String, Files>,
    /// `volume/path` → (token, refresh due).
    tokens: HashMap<String, (String, Instant)>,
}

impl VolumeSet {
    pub fn new(pod_dir: &Path) -> Self {
        Self {
            dir: pod_dir.join("volumes"),
            written: HashMap::new(),
            tokens: HashMap::new(),
        }
    }

    pub fn volume_dir(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Creates or refreshes every volume of the pod. Content is rewritten only when it changed,
    /// so a periodic call is cheap and updates ConfigMap/Secret volumes like the kubelet.
    pub async fn sync(&mut self, client: &Client, pod: &Pod) -> Result<(), VolumeError> {
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        for v in &volumes {
            let dir = self.volume_dir(&v.name);
            let io = |path: &Path, source| VolumeError::Io {
                volume: v.name.clone(),
                path: path.to_path_buf(),
                source,
            };
            std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
            if v.empty_dir.is_some() {
                // Survives container restarts; removed with the pod directory.
                continue;
            }
            let files = self.desired(client, pod, v).await?;
            if self.written.get(&v.name) == Some(&files) {
                continue;
            }
            write_atomic(&dir, &files).map_err(|(p, e)| io(&p, e))?;
            self.written.insert(v.name.clone(), files);
        }
        Ok(())
    }

    async fn desired(
        &mut self,
        client: &Client,
        pod: &Pod,
        v: &Volume,
    ) -> Result<Files, VolumeError> {
        let ns = pod.namespace().unwrap_or_default();
        let mut files = Files::new();
        if let Some(cm) = &v.config_map {
            let mode = mode_or(cm.default_mode, DEFAULT_MODE);
            let optional = cm.optional == Some(true);
            match get_config_map(client, &ns, &cm.name, &v.name).await? {
                Some(obj) => {
                    let data = config_map_data(&obj);
                    let src = Source::new(&v.name, "ConfigMap", &ns, &cm.name);
                    project_keys(&src, &data, cm.items.as_deref(), optional, mode, &mut files)?;
                }
                None if optional => {}
                None => return Err(not_found(&v.name, "ConfigMap", &ns, &cm.name)),
            }
        } else if let Some(s) = &v.secret {
            let mode = mode_or(s.default_mode, DEFAULT_MODE);
            let optional = s.optional == Some(true);
            let name = s.secret_name.clone().unwrap_or_default();
            match get_secret(client, &ns, &name, &v.name).await? {
                Some(obj) => {
                    let data = secret_data(&obj);
                    let src = Source::new(&v.name, "Secret", &ns, &name);
                    project_keys(&src, &data, s.items.as_deref(), optional, mode, &mut files)?;
                }
                None if optional => {}
                None => return Err(not_found(&v.name, "Secret", &ns, &name)),
            }
        } else if let Some(d) = &v.downward_api {
            let mode = mode_or(d.default_mode, DEFAULT_MODE);
            downward_files(&v.name, pod, d.items.as_deref(), mode, &mut files)?;
        } else if let Some(p) = &v.projected {
            let mode = mode_or(p.default_mode, DEFAULT_MODE);
            for source in p.sources.iter().flatten() {
                if let Some(cm) = &source.config_map {
                    let optional = cm.optional == Some(true);
                    match get_config_map(client, &ns, &cm.name, &v.name).await? {
                        Some(obj) => {
                            let data = config_map_data(&obj);
                            let src = Source::new(&v.name, "ConfigMap", &ns, &cm.name);
                            project_keys(
                                &src,
                                &data,
                                cm.items.as_deref(),
                                optional,
                                mode,
                                &mut files,
                            )?;
                        }
                        None if optional => {}
                        None => return Err(not_found(&v.name, "ConfigMap", &ns, &cm.name)),
                    }
                }
                if let Some(s) = &source.secret {
                    let optional = s.optional == Some(true);
                    match get_secret(client, &ns, &s.name, &v.name).await? {
                        Some(obj) => {
                            let data = secret_data(&obj);
                            let src = Source::new(&v.name, "Secret", &ns, &s.name);
                            project_keys(
                                &src,
                                &data,
                                s.items.as_deref(),
                                optional,
                                mode,
                                &mut files,
                            )?;
                        }
                        None if optional => {}
                        None => return Err(not_found(&v.name, "Secret", &ns, &s.name)),
                    }
                }
                if let Some(d) = &source.downward_api {
                    downward_files(&v.name, pod, d.items.as_deref(), mode, &mut files)?;
                }
                if let Some(t) = &source.service_account_token {
                    let path = check_rel(&v.name, &t.path)?;
                    let key = format!("{}/{path}", v.name);
                    let now = Instant::now();
                    let token = match self.tokens.get(&key) {
                        Some((tok, due)) if *due > now => tok.clone(),
                        _ => {
                            let secs = t.expiration_seconds.unwrap_or(DEFAULT_TOKEN_SECONDS);
                            let tok = request_token(
                                client,
                                pod,
                                &v.name,
                                t.audience.clone().into_iter().collect(),
                                secs,
                            )
                            .await?;
                            let due = now + Duration::from_secs((secs.max(60) as u64) * 8 / 10);
                            self.tokens.insert(key, (tok.clone(), due));
                            tok
                        }
                    };
                    files.insert(path, (token.into_bytes(), mode));
                }
                if source.cluster_trust_bundle.is_some() {
                    return Err(VolumeError::Unsupported {
                        volume: v.name.clone(),
                        what: "projected clusterTrustBundle".into(),
                    });
                }
            }
        } else {
            return Err(VolumeError::Unsupported {
                volume: v.name.clone(),
                what: volume_type(v),
            });
        }
        Ok(files)
    }

    /// The bind mounts of one container, parents before children. `env` expands
    /// `subPathExpr`. ConfigMap, Secret, downward API and projected volumes are always mounted
    /// read-only, as the kubelet does.
    pub fn container_mounts(
        &self,
        pod: &Pod,
        container: &Container,
        env: &BTreeMap<String, String>,
    ) -> Result<Vec<Mount>, VolumeError> {
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let mut mounts = Vec::new();
        for vm in container.volume_mounts.iter().flatten() {
            let err = |what: String| VolumeError::Mount {
                container: container.name.clone(),
                mount_path: vm.mount_path.clone(),
                what,
            };
            let Some(vol) = volumes.iter().find(|v| v.name == vm.name) else {
                return Err(err(format!("no volume named {:?} in the pod", vm.name)));
            };
            let target = PathBuf::from(&vm.mount_path);
            if !target.is_absolute() {
                return Err(err("mountPath must be absolute".into()));
            }
            let vol_dir = self.volume_dir(&vm.name);
            let sub = match (&vm.sub_path, &vm.sub_path_expr) {
                (Some(s), _) if !s.is_empty() => Some(s.clone()),
                (_, Some(e)) if !e.is_empty() => Some(process::expand_dollar_refs(e, env)),
                _ => None,
            };
            let source = match sub {
                None => vol_dir.clone(),
                Some(sub) => {
                    let rel = check_rel(&vm.name, &sub).map_err(|e| err(e.to_string()))?;
                    let p = vol_dir.join(&rel);
                    if std::fs::symlink_metadata(&p).is_err() {
                        // The kubelet creates a missing subPath as a directory.
                        std::fs::create_dir_all(&p)
                            .map_err(|e| err(format!("cannot create subPath {rel:?}: {e}")))?;
                    }
                    // Resolve the `..data` indirection now: a subPath mount is pinned to the
                    // content at container start, as with the kubelet.
                    let real = p
                        .canonicalize()
                        .map_err(|e| err(format!("cannot resolve subPath {rel:?}: {e}")))?;
                    let root = vol_dir
                        .canonicalize()
                        .map_err(|e| err(format!("cannot resolve the volume directory: {e}")))?;
                    if !real.starts_with(&root) {
                        return Err(err(format!("subPath {rel:?} leaves the volume")));
                    }
                    real
                }
            };
            let always_ro = vol.config_map.is_some()
                || vol.secret.is_some()
                || vol.downward_api.is_some()
                || vol.projected.is_some();
            mounts.push(Mount {
                source,
                target,
                read_only: vm.read_only == Some(true) || always_ro,
            });
        }
        mounts.sort_by_key(|m| m.target.components().count());
        Ok(mounts)
    }
}

/// Creates each mountpoint: on the host, or inside an earlier mount's source when the target
/// lies under an earlier mount (so nested mounts work inside the namespace).
pub fn ensure_mountpoints(mounts: &[Mount]) -> std::io::Result<()> {
    for (i, m) in mounts.iter().enumerate() {
        let host = mounts[..i]
            .iter()
            .filter(|p| m.target.starts_with(&p.target) && m.target != p.target)
            .max_by_key(|p| p.target.components().count())
            .map(|p| {
                p.source
                    .join(m.target.strip_prefix(&p.target).unwrap_or(&m.target))
            })
            .unwrap_or_else(|| m.target.clone());
        if m.source.is_dir() {
            if !host.is_dir() {
                std::fs::create_dir_all(&host)?;
            }
        } else {
            if let Some(parent) = host.parent() {
                std::fs::create_dir_all(parent)?;
            }
            if !host.exists() {
                std::fs::File::create(&host)?;
            }
        }
    }
    Ok(())
}

/// Mounts as C strings, built before `fork` (the child must not allocate).
pub struct PreparedMounts(Vec<(CString, CString, bool)>);

impl PreparedMounts {
    pub fn new(mounts: &[Mount]) -> Result<Self, String> {
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes())
                .map_err(|_| format!("path {} contains a NUL byte", p.display()))
        };
        mounts
            .iter()
            .map(|m| Ok((c(&m.source)?, c(&m.target)?, m.read_only)))
            .collect::<Result<Vec<_>, String>>()
            .map(Self)
    }

    /// Runs in the forked child before exec: a private mount namespace with the bind mounts.
    /// Only async-signal-safe system calls; no allocation.
    pub fn apply_in_child(&self) -> std::io::Result<()> {
        let last = || Err(std::io::Error::last_os_error());
        // SAFETY: plain system calls on NUL-terminated strings that outlive the calls.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return last();
            }
            if libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return last();
            }
            for (src, dst, ro) in &self.0 {
                if libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ) != 0
                {
                    return last();
                }
                if *ro
                    && libc::mount(
                        std::ptr::null(),
                        dst.as_ptr(),
                        std::ptr::null(),
                        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY,
                        std::ptr::null(),
                    ) != 0
                {
                    return last();
                }
            }
        }
        Ok(())
    }
}

/// Whether this process may create mount namespaces (root with CAP_SYS_ADMIN); checked once
/// by running `unshare -m true`.
pub fn mount_namespaces_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::process::Command::new("unshare")
            .args(["-m", "true"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Reads a termination message file: at most [`TERMINATION_MESSAGE_MAX`] bytes, lossy UTF-8.
pub fn read_termination_message(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(TERMINATION_MESSAGE_MAX as u64)
        .read_to_end(&mut buf)
        .ok()?;
    (!buf.is_empty()).then(|| String::from_utf8_lossy(&buf).into_owned())
}

/// The tail of a log for `FallbackToLogsOnError`: the last 80 lines, at most 2048 bytes.
pub fn log_tail(path: &Path) -> Option<String> {
    let data = std::fs::read(path).ok()?;
    let start = data.len().saturating_sub(2048);
    let text = String::from_utf8_lossy(&data[start..]).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(80)..].join("\n");
    (!tail.is_empty()).then_some(tail)
}

struct Source<'a> {
    volume: &'a str,
    kind: &'static str,
    namespace: &'a str,
    name: &'a str,
}

impl<'a> Source<'a> {
    fn new(volume: &'a str, kind: &'static str, namespace: &'a str, name: &'a str) -> Self {
        Self {
            volume,
            kind,
            namespace,
            name,
        }
    }
}

fn mode_or(mode: Option<i32>, default: u32) -> u32 {
    mode.map(|m| (m as u32) & 0o7777).unwrap_or(default)
}

fn not_found(volume: &str, kind: &'static str, ns: &str, name: &str) -> VolumeError {
    VolumeError::NotFound {
        volume: volume.into(),
        kind,
        namespace: ns.into(),
        name: name.into(),
    }
}

/// All keys, or the listed `items` (a missing listed key is an error unless `optional`).
fn project_keys(
    src: &Source<'_>,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    optional: bool,
    mode: u32,
    files: &mut Files,
) -> Result<(), VolumeError> {
    match items {
        None | Some([]) => {
            for (k, v) in data {
                let path = check_rel(src.volume, k)?;
                files.insert(path, (v.clone(), mode));
            }
        }
        Some(items) => {
            for it in items {
                let Some(v) = data.get(&it.key) else {
                    if optional {
                        continue;
                    }
                    return Err(VolumeError::KeyNotFound {
                        volume: src.volume.into(),
                        kind: src.kind,
                        namespace: src.namespace.into(),
                        name: src.name.into(),
                        key: it.key.clone(),
                    });
                };
                let path = check_rel(src.volume, &it.path)?;
                files.insert(path, (v.clone(), mode_or(it.mode, mode)));
            }
        }
    }
    Ok(())
}

fn downward_files(
    volume: &str,
    pod: &Pod,
    items: Option<&[DownwardAPIVolumeFile]>,
    mode: u32,
    files: &mut Files,
) -> Result<(), VolumeError> {
    for it in items.unwrap_or_default() {
        let path = check_rel(volume, &it.path)?;
        let value = if let Some(f) = &it.field_ref {
            let m = &pod.metadata;
            let map_lines = |m: Option<&BTreeMap<String, String>>| {
                m.into_iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}={v:?}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            match f.field_path.as_str() {
                "metadata.labels" => map_lines(m.labels.as_ref()),
                "metadata.annotations" => map_lines(m.annotations.as_ref()),
                p => process::pod_field(pod, &it.path, p).map_err(|e| VolumeError::Invalid {
                    volume: volume.into(),
                    what: e.to_string(),
                })?,
            }
        } else if it.resource_field_ref.is_some() {
            return Err(VolumeError::Unsupported {
                volume: volume.into(),
                what: "downwardAPI resourceFieldRef".into(),
            });
        } else {
            return Err(VolumeError::Invalid {
                volume: volume.into(),
                what: format!("downwardAPI item {:?} has no fieldRef", it.path),
            });
        };
        files.insert(path, (value.into_bytes(), mode_or(it.mode, mode)));
    }
    Ok(())
}

/// A relative path without `..` components, not starting with `..` (reserved for the atomic
/// writer's own entries).
fn check_rel(volume: &str, p: &str) -> Result<String, VolumeError> {
    let bad = |why: &str| VolumeError::Invalid {
        volume: volume.into(),
        what: format!("path {p:?} {why}"),
    };
    if p.is_empty() {
        return Err(bad("is empty"));
    }
    if p.starts_with("..") {
        return Err(bad("must not start with '..'"));
    }
    let path = Path::new(p);
    if path.is_absolute() {
        return Err(bad("must be relative"));
    }
    if path
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(bad("must not contain '..' or '.' components"));
    }
    Ok(p.to_string())
}

/// The kubelet's atomic writer: new content in `..<n>`, `..data` swapped by rename, stable
/// top-level symlinks. Readers see either the old or the new set of files, never a mix.
fn write_atomic(dir: &Path, files: &Files) -> Result<(), (PathBuf, std::io::Error)> {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let version = format!("..{nanos}");
    let vdir = dir.join(&version);
    let at = |p: &Path| {
        let p = p.to_path_buf();
        move |e| (p, e)
    };
    std::fs::create_dir_all(&vdir).map_err(at(&vdir))?;
    for (rel, (bytes, mode)) in files {
        let path = vdir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(at(parent))?;
        }
        std::fs::write(&path, bytes).map_err(at(&path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))
            .map_err(at(&path))?;
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    symlink(&version, &tmp).map_err(at(&tmp))?;
    std::fs::rename(&tmp, dir.join("..data")).map_err(at(&dir.join("..data")))?;
    let top: std::collections::BTreeSet<String> = files
        .keys()
        .filter_map(|k| k.split('/').next().map(str::to_string))
        .collect();
    for name in &top {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(format!("..data/{name}"), &link).map_err(at(&link))?;
        }
    }
    for entry in std::fs::read_dir(dir).map_err(at(dir))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.starts_with("..") {
            if name != "..data" && name != version {
                let _ = std::fs::remove_dir_all(&path);
            }
        } else if !top.contains(&name) {
            let _ = std::fs::remove_file(&path);
        }
    }
    Ok(())
}

fn volume_type(v: &Volume) -> String {
    let known = [
        (v.host_path.is_some(), "hostPath"),
        (v.persistent_volume_claim.is_some(), "persistentVolumeClaim"),
        (v.nfs.is_some(), "nfs"),
        (v.csi.is_some(), "csi"),
        (v.ephemeral.is_some(), "ephemeral"),
        (v.image.is_some(), "image"),
        (v.iscsi.is_some(), "iscsi"),
    ];
    known
        .iter()
        .find(|(set, _)| *set)
        .map(|(_, n)| (*n).to_string())
        .unwrap_or_else(|| "this type of".into())
}

async fn get_config_map(
    client: &Client,
    ns: &str,
    name: &str,
    volume: &str,
) -> Result<Option<ConfigMap>, VolumeError> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|source| VolumeError::Api {
            volume: volume.into(),
            kind: "ConfigMap",
            namespace: ns.into(),
            name: name.into(),
            source: Box::new(source),
        })
}

async fn get_secret(
    client: &Client,
    ns: &str,
    name: &str,
    volume: &str,
) -> Result<Option<Secret>, VolumeError> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|source| VolumeError::Api {
            volume: volume.into(),
            kind: "Secret",
            namespace: ns.into(),
            name: name.into(),
            source: Box::new(source),
        })
}

fn config_map_data(c: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = c
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    for (k, v) in c.binary_data.iter().flatten() {
        out.insert(k.clone(), v.0.clone());
    }
    out
}

fn secret_data(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in s.string_data.iter().flatten() {
        out.insert(k.clone(), v.clone().into_bytes());
    }
    out
}

async fn request_token(
    client: &Client,
    pod: &Pod,
    volume: &str,
    audiences: Vec<String>,
    seconds: i64,
) -> Result<String, VolumeError> {
    bound_token(client, pod, audiences, seconds)
        .await
        .map_err(|message| VolumeError::Token {
            volume: volume.into(),
            sa: service_account(pod),
            message,
        })
}

/// The pod's service account, `default` when unset (as admission leaves it).
pub(super) fn service_account(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into())
}

/// How long a token request answered "no relationship found" is retried (see `bound_token`).
const NODE_GRAPH_LAG: Duration = Duration::from_secs(5);

/// Requests a token for the pod's service account, bound to the pod. The node authorizer
/// answers 403 "no relationship found between node … and this object" until its graph (fed by
/// the apiserver's own informers) has seen the pod bound to this node, which can trail the
/// binding the agent just watched; the kubelet rides this out by retrying, and so does this:
/// only an answer that is still a refusal after `NODE_GRAPH_LAG` is reported.
pub(super) async fn bound_token(
    client: &Client,
    pod: &Pod,
    audiences: Vec<String>,
    seconds: i64,
) -> Result<String, String> {
    let ns = pod.namespace().unwrap_or_default();
    let sa = service_account(pod);
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences,
            expiration_seconds: Some(seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.name_any()),
                uid: pod.uid(),
            }),
        },
        ..Default::default()
    };
    let api = Api::<ServiceAccount>::namespaced(client.clone(), &ns);
    let deadline = Instant::now() + NODE_GRAPH_LAG;
    let mut pause = Duration::from_millis(50);
    loop {
        match api
            .create_token_request(&sa, &PostParams::default(), &req)
            .await
        {
            Ok(answer) => {
                return answer
                    .status
                    .map(|s| s.token)
                    .ok_or_else(|| "the token request returned no token".into());
            }
            Err(kube::Error::Api(e))
                if e.code == 403
                    && e.message.contains("no relationship found")
                    && Instant::now() + pause < deadline =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(800));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests;
