//! Online views of runs: `runs`, `describe`, `resume` (Kubernetes API) and `events` (the
//! run's JetStream subjects). Formatting is pure and unit-tested; the I/O shells are thin.

pub mod events;
pub mod pause;
pub mod resume;
pub mod runs;

use anyhow::{Context as _, Result};
use clap::Args;
use kube::Client;

/// Where the Run lives (kubectl conventions).
#[derive(Args, Debug, Clone)]
pub struct NamespaceArg {
    /// Namespace of the run; defaults to the kubeconfig context's namespace.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

/// A client from KUBECONFIG / in-cluster config and the namespace to use.
pub async fn client_and_namespace(ns: Option<&str>) -> Result<(Client, String)> {
    let config = kube::Config::infer().await.context(
        "cannot load a Kubernetes configuration: set KUBECONFIG or run inside a cluster",
    )?;
    let namespace = ns
        .map(str::to_owned)
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).context("cannot build a Kubernetes client")?;
    Ok((client, namespace))
}

/// Human age like kubectl: `45s`, `12m`, `3h`, `5d`.
pub fn format_age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// Minimal ANSI styling, disabled when stdout is not a terminal or NO_COLOR is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub enabled: bool,
}

impl Style {
    pub fn detect() -> Self {
        use std::io::IsTerminal;
        Style {
            enabled: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }
    pub fn paint(self, code: &str, text: &str) -> String {
        if self.enabled {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

/// Cuts `s` to `max` characters (adding `…`) and folds newlines, for one-line summaries.
pub fn one_line(s: &str, max: usize) -> String {
    let folded: String = s
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    match folded.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &folded[..i]),
        None => folded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(format_age(-3), "0s");
        assert_eq!(format_age(45), "45s");
        assert_eq!(format_age(119), "119s");
        assert_eq!(format_age(120), "2m");
        assert_eq!(format_age(7199), "119m");
        assert_eq!(format_age(7200), "2h");
        assert_eq!(format_age(3 * 86_400 + 5), "3d");
    }

    #[test]
    fn one_line_folds_and_cuts() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("héllo world", 5), "héllo…");
    }

    #[test]
    fn style_off_is_plain() {
        assert_eq!(Style { enabled: false }.paint("31", "x"), "x");
        assert_eq!(Style { enabled: true }.paint("31", "x"), "\x1b[31mx\x1b[0m");
    }
}
