//! Image → local binary mapping for the node agent (see e2e/README.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read node agent config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid node agent config {path}: {source}")]
    Parse {
        path: PathBuf,
        source: serde_yaml::Error,
    },
}

/// The config file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentConfig {
    #[serde(default)]
    pub restart_backoff: Backoff,
    #[serde(default)]
    pub images: Vec<ImageMapping>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Backoff {
    pub initial_seconds: f64,
    pub max_seconds: f64,
}

impl Default for Backoff {
    // Shorter than the kubelet's 10 s → 300 s so restart tests stay quick.
    fn default() -> Self {
        Self {
            initial_seconds: 1.0,
            max_seconds: 30.0,
        }
    }
}

impl Backoff {
    pub fn initial(&self) -> Duration {
        Duration::from_secs_f64(self.initial_seconds.max(0.0))
    }
    pub fn max(&self) -> Duration {
        Duration::from_secs_f64(self.max_seconds.max(self.initial_seconds).max(0.0))
    }
}

/// One image pattern and what running it means on this machine.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageMapping {
    /// Glob (`*`, `?`) over the image reference. Without a tag or digest it matches any tag.
    pub image: String,
    /// The image's ENTRYPOINT: used when the container sets no `command`.
    #[serde(default)]
    pub entrypoint: Vec<String>,
    /// The image's CMD: used when the container sets neither `command` nor `args`.
    #[serde(default)]
    pub cmd: Vec<String>,
    /// Paths inside the image → paths on this machine, applied to the program (argv[0]).
    #[serde(default)]
    pub paths: BTreeMap<String, String>,
    /// The image's ENV.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl AgentConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    pub fn parse(text: &str) -> Result<Self, serde_yaml::Error> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_yaml::from_str(text)
    }

    /// The first mapping (config file entries, then the built-in ones) for `image`, with
    /// `${VAR}` / `${VAR:-default}` expanded from `vars`.
    pub fn resolve(
        &self,
        image: &str,
        vars: &dyn Fn(&str) -> Option<String>,
    ) -> Option<ImageMapping> {
        let image = normalize_image(image);
        self.images
            .iter()
            .chain(builtin_mappings().iter())
            .find(|m| image_matches(&m.image, &image))
            .map(|m| ImageMapping {
                image: m.image.clone(),
                entrypoint: m.entrypoint.iter().map(|s| expand_vars(s, vars)).collect(),
                cmd: m.cmd.iter().map(|s| expand_vars(s, vars)).collect(),
                paths: m
                    .paths
                    .iter()
                    .map(|(k, v)| (k.clone(), expand_vars(v, vars)))
                    .collect(),
                env: m
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), expand_vars(v, vars)))
                    .collect(),
            })
    }
}

/// Images every agent understands without configuration: shell-style test images whose
/// commands are found on this machine's PATH.
pub fn builtin_mappings() -> &'static [ImageMapping] {
    static BUILTIN: std::sync::OnceLock<Vec<ImageMapping>> = std::sync::OnceLock::new();
    BUILTIN.get_or_init(|| {
        let shell = |image: &str| ImageMapping {
            image: image.to_string(),
            entrypoint: vec![],
            cmd: vec!["/bin/sh".to_string()],
            paths: BTreeMap::new(),
            env: BTreeMap::new(),
        };
        vec![
            ImageMapping {
                image: "local/sh".to_string(),
                entrypoint: vec!["/bin/sh".to_string()],
                ..shell("local/sh")
            },
            shell("busybox"),
            shell("alpine"),
            shell("debian"),
        ]
    })
}

/// `docker.io/library/busybox:1.36` → `busybox:1.36`, as people write images.
pub fn normalize_image(image: &str) -> String {
    let mut s = image.trim();
    for prefix in ["docker.io/", "index.docker.io/"] {
        if let Some(rest) = s.strip_prefix(prefix) {
            s = rest;
        }
    }
    if let Some(rest) = s.strip_prefix("library/") {
        s = rest;
    }
    s.to_string()
}

/// Splits `repo[:tag][@digest]` → repo (a `:` before the last `/` is a registry port).
fn repository(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last_slash = no_digest.rfind('/').map(|i| i + 1).unwrap_or(0);
    match no_digest[last_slash..].find(':') {
        Some(i) => &no_digest[..last_slash + i],
        None => no_digest,
    }
}

pub fn image_matches(pattern: &str, image: &str) -> bool {
    let pattern = normalize_image(pattern);
    if glob_match(&pattern, image) {
        return true;
    }
    // A plain repository pattern matches every tag and digest of that repository.
    let has_tag = pattern.contains('@') || repository(&pattern) != pattern;
    !has_tag && glob_match(&pattern, repository(image))
}

/// `*` matches any run of characters (including `/`), `?` one character.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Expands `${VAR}` and `${VAR:-default}`; unknown variables without a default become "".
pub fn expand_vars(s: &str, vars: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let expr = &after[..end];
        let (name, default) = match expr.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (expr, None),
        };
        match vars(name).filter(|v| !v.is_empty()) {
            Some(v) => out.push_str(&v),
            None => out.push_str(default.unwrap_or("")),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_vars(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn globs() {
        assert!(glob_match("openwop/worker:*", "openwop/worker:0.1.0"));
        assert!(glob_match("*/worker:*", "ghcr.io/x/worker:1"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("openwop/worker:*", "openwop/operator:1"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("a", ""));
    }

    #[test]
    fn repository_patterns_match_any_tag() {
        assert!(image_matches("busybox", "busybox"));
        assert!(image_matches("busybox", "busybox:1.36"));
        assert!(image_matches(
            "busybox",
            &normalize_image("docker.io/library/busybox:1.36")
        ));
        assert!(image_matches("localhost:5000/x", "localhost:5000/x:2"));
        assert!(!image_matches("busybox:1.35", "busybox:1.36"));
        assert!(!image_matches("busybox", "busyboxx"));
    }

    #[test]
    fn expansion() {
        let vars = |k: &str| (k == "T").then(|| "/tgt".to_string());
        assert_eq!(expand_vars("${T}/debug/x", &vars), "/tgt/debug/x");
        assert_eq!(expand_vars("${U:-/d}/x", &vars), "/d/x");
        assert_eq!(expand_vars("${U}x", &vars), "x");
        assert_eq!(expand_vars("a${T", &vars), "a${T");
    }

    #[test]
    fn config_entries_win_over_builtins() {
        let cfg = AgentConfig::parse(
            "images:\n  - image: busybox\n    entrypoint: ['${X:-/bin/true}']\n",
        )
        .unwrap();
        let m = cfg.resolve("busybox:latest", &no_vars).unwrap();
        assert_eq!(m.entrypoint, vec!["/bin/true"]);
        let sh = cfg.resolve("local/sh", &no_vars).unwrap();
        assert_eq!(sh.entrypoint, vec!["/bin/sh"]);
        assert!(cfg.resolve("nginx:1", &no_vars).is_none());
    }

    #[test]
    fn unknown_fields_are_rejected() {
        assert!(AgentConfig::parse("imagez: []").is_err());
    }
}
