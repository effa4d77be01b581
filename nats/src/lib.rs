//! NATS for every OpenWOP NATS client — the operator's run-event consumer, the worker's
//! publisher and `kubectl-openwop events`: authentication (this module) and the run-events
//! stream ([`stream`]: create or update it from protocol's `StreamSpec`, purge one run).
//!
//! Credentials come from a directory — the Secret named by the chart's
//! `nats.external.credentialsSecret`, mounted as files — holding exactly one form:
//! - `nats.creds`: a NATS credentials file (user JWT and NKey seed, as `nsc generate creds`
//!   writes it);
//! - `token`: an authorization token;
//! - `username` and `password`.
//!
//! Other files in the directory are ignored. Secret values never appear in `Debug` output or in
//! errors.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use async_nats::ConnectOptions;

pub mod reader;
pub mod stream;
#[cfg(feature = "testing")]
pub mod testing;

/// File (Secret key) with a NATS credentials file.
pub const CREDS_FILE: &str = "nats.creds";
/// File (Secret key) with an authorization token.
pub const TOKEN: &str = "token";
/// File (Secret key) with the user name (with [`PASSWORD`]).
pub const USERNAME: &str = "username";
/// File (Secret key) with the password (with [`USERNAME`]).
pub const PASSWORD: &str = "password";
/// Every file (Secret key) a credentials directory may hold; nothing else is read or copied.
pub const KEYS: [&str; 4] = [CREDS_FILE, TOKEN, USERNAME, PASSWORD];
/// Largest credentials file read (a creds file is about 1 KiB): a wrong mount fails early.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Why credentials could not be loaded or used. Never carries a secret value.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read NATS credentials file {path}: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error(
        "NATS credentials directory {dir}: {problem}; it must hold exactly one of `nats.creds` \
         (a NATS credentials file), `token`, or `username` and `password`"
    )]
    Invalid { dir: PathBuf, problem: String },
    #[error(
        "{path} is not a NATS credentials file: {problem} (expected what `nsc generate creds` \
         writes: a `-----BEGIN NATS USER JWT-----` block, then a `-----BEGIN USER NKEY SEED-----` block)"
    )]
    NotCreds {
        path: PathBuf,
        problem: &'static str,
    },
    #[error("{what} is empty")]
    Empty { what: String },
}

/// A secret string whose `Debug` prints `[REDACTED]`; it has no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

/// How a client authenticates to NATS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NatsAuth {
    /// No authentication (the chart's own NATS).
    #[default]
    None,
    /// A NATS credentials file (`source` names it in messages).
    Credentials {
        source: PathBuf,
        contents: Secret,
    },
    Token(Secret),
    UserPassword {
        user: String,
        password: Secret,
    },
}

impl NatsAuth {
    /// Loads the one form of credentials in `dir` (see the crate docs). A missing directory, no
    /// recognised file, two forms at once or a half-configured form are errors naming the
    /// problem.
    pub fn from_dir(dir: &Path) -> Result<Self, AuthError> {
        let invalid = |problem: String| AuthError::Invalid {
            dir: dir.to_owned(),
            problem,
        };
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(invalid("is not a directory".into())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(invalid("does not exist (is the Secret mounted?)".into()));
            }
            Err(e) => {
                return Err(AuthError::Unreadable {
                    path: dir.to_owned(),
                    reason: e.to_string(),
                });
            }
        }
        let mut found = BTreeMap::new();
        for key in KEYS {
            if let Some(text) = read_optional(&dir.join(key))? {
                found.insert(key, text);
            }
        }
        let present: Vec<&str> = found.keys().copied().collect();
        match present.as_slice() {
            [] => Err(invalid("holds none of these files".into())),
            [CREDS_FILE] => Self::creds(&dir.join(CREDS_FILE), found.remove(CREDS_FILE).unwrap()),
            [TOKEN] => Self::token(&dir.join(TOKEN), &found[TOKEN]),
            [PASSWORD, USERNAME] => Self::user_password(
                &found[USERNAME],
                &found[PASSWORD],
                &format!("{}/{{{USERNAME},{PASSWORD}}}", dir.display()),
            ),
            [USERNAME] => Err(invalid(format!("has `{USERNAME}` but no `{PASSWORD}`"))),
            [PASSWORD] => Err(invalid(format!("has `{PASSWORD}` but no `{USERNAME}`"))),
            several => Err(invalid(format!(
                "holds {} at once (pick one form)",
                several
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// A NATS credentials file (`--nats-creds`).
    pub fn from_creds_file(path: &Path) -> Result<Self, AuthError> {
        match read_optional(path)? {
            Some(text) => Self::creds(path, text),
            None => Err(AuthError::Unreadable {
                path: path.to_owned(),
                reason: "no such file".into(),
            }),
        }
    }

    /// A token read from a file (`--nats-token-file`), so it stays out of shell history.
    pub fn from_token_file(path: &Path) -> Result<Self, AuthError> {
        match read_optional(path)? {
            Some(text) => Self::token(path, &text),
            None => Err(AuthError::Unreadable {
                path: path.to_owned(),
                reason: "no such file".into(),
            }),
        }
    }

    /// A user name and password; `source` says where they came from, for messages.
    pub fn user_password(user: &str, password: &str, source: &str) -> Result<Self, AuthError> {
        let user = strip_newline(user);
        let password = strip_newline(password);
        if user.is_empty() {
            return Err(AuthError::Empty {
                what: format!("the NATS user name ({source})"),
            });
        }
        if password.is_empty() {
            return Err(AuthError::Empty {
                what: format!("the NATS password ({source})"),
            });
        }
        Ok(NatsAuth::UserPassword {
            user: user.to_owned(),
            password: Secret::new(password),
        })
    }

    fn token(path: &Path, text: &str) -> Result<Self, AuthError> {
        let token = strip_newline(text);
        if token.is_empty() {
            return Err(AuthError::Empty {
                what: format!("the NATS token {}", path.display()),
            });
        }
        Ok(NatsAuth::Token(Secret::new(token)))
    }

    fn creds(path: &Path, text: String) -> Result<Self, AuthError> {
        let not_creds = |problem| AuthError::NotCreds {
            path: path.to_owned(),
            problem,
        };
        if !text.contains("BEGIN NATS USER JWT") {
            return Err(not_creds("it has no user JWT block"));
        }
        if !text.contains("BEGIN USER NKEY SEED") {
            return Err(not_creds("it has no NKey seed block"));
        }
        let auth = NatsAuth::Credentials {
            source: path.to_owned(),
            contents: Secret::new(text),
        };
        // Parse once now, so a broken file is reported where it is loaded, not at connect.
        auth.apply(ConnectOptions::new())?;
        Ok(auth)
    }

    /// True when no credentials are configured.
    pub fn is_none(&self) -> bool {
        matches!(self, NatsAuth::None)
    }

    /// The form, for logs (never the values).
    pub fn kind(&self) -> &'static str {
        match self {
            NatsAuth::None => "none",
            NatsAuth::Credentials { .. } => "credentials file",
            NatsAuth::Token(_) => "token",
            NatsAuth::UserPassword { .. } => "username and password",
        }
    }

    /// `opts` authenticating with these credentials.
    pub fn apply(&self, opts: ConnectOptions) -> Result<ConnectOptions, AuthError> {
        Ok(match self {
            NatsAuth::None => opts,
            NatsAuth::Credentials { source, contents } => {
                // The parser's own message may quote the file: replace it.
                opts.credentials(&contents.0)
                    .map_err(|_| AuthError::NotCreds {
                        path: source.clone(),
                        problem: "its user JWT or NKey seed is malformed",
                    })?
            }
            NatsAuth::Token(t) => opts.token(t.0.clone()),
            NatsAuth::UserPassword { user, password } => {
                opts.user_and_password(user.clone(), password.0.clone())
            }
        })
    }

    /// These credentials in the directory (Secret) layout: the files a copy must hold.
    pub fn secret_data(&self) -> BTreeMap<String, String> {
        match self {
            NatsAuth::None => BTreeMap::new(),
            NatsAuth::Credentials { contents, .. } => {
                BTreeMap::from([(CREDS_FILE.to_owned(), contents.0.clone())])
            }
            NatsAuth::Token(t) => BTreeMap::from([(TOKEN.to_owned(), t.0.clone())]),
            NatsAuth::UserPassword { user, password } => BTreeMap::from([
                (USERNAME.to_owned(), user.clone()),
                (PASSWORD.to_owned(), password.0.clone()),
            ]),
        }
    }
}

/// Connect options for client `name` authenticating with `auth`. Errors the server reports on
/// a live connection (an authorization violation after a credentials rotation, say) are logged
/// with the credentials' form, never their values.
pub fn connect_options(name: &str, auth: &NatsAuth) -> Result<ConnectOptions, AuthError> {
    let kind = auth.kind();
    let opts = ConnectOptions::new()
        .name(name)
        .event_callback(move |event| async move {
            match event {
                async_nats::Event::ServerError(e) => {
                    tracing::error!(credentials = kind, error = %e, "NATS server error (an authorization violation means the credentials are wrong or lack permission for the openwop.> subjects and the JetStream API)");
                }
                async_nats::Event::ClientError(e) => {
                    tracing::warn!(credentials = kind, error = %e, "NATS client error");
                }
                _ => {}
            }
        });
    auth.apply(opts)
}

/// `Secret` files often end with the newline of the file they were created from.
fn strip_newline(s: &str) -> &str {
    s.trim_end_matches(['\n', '\r'])
}

/// The UTF-8 text of `path`; `None` when it does not exist.
fn read_optional(path: &Path) -> Result<Option<String>, AuthError> {
    let unreadable = |reason: String| AuthError::Unreadable {
        path: path.to_owned(),
        reason,
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unreadable(e.to_string())),
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(e.to_string()))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(unreadable(format!(
            "larger than {} KiB: not a credentials file",
            MAX_FILE_BYTES / 1024
        )));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| unreadable("not UTF-8 text".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A well-formed credentials file for a fresh user key (the JWT is not verified locally).
    pub(crate) fn creds_text(seed: &str) -> String {
        format!(
            "-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln\n\
             ------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
        )
    }

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (k, v) in files {
            std::fs::write(d.path().join(k), v).unwrap();
        }
        d
    }

    #[test]
    fn each_form_loads_from_a_directory() {
        let d = dir_with(&[("username", "ops\n"), ("password", "hunter2-pw\n")]);
        let auth = NatsAuth::from_dir(d.path()).unwrap();
        assert_eq!(
            auth,
            NatsAuth::UserPassword {
                user: "ops".into(),
                password: Secret::new("hunter2-pw")
            }
        );
        assert_eq!(auth.kind(), "username and password");

        let d = dir_with(&[("token", "tok-123\r\n"), ("ca.crt", "ignored")]);
        let auth = NatsAuth::from_dir(d.path()).unwrap();
        assert_eq!(auth, NatsAuth::Token(Secret::new("tok-123")));
        assert_eq!(
            auth.secret_data(),
            BTreeMap::from([("token".into(), "tok-123".into())]),
            "only recognised keys, newline stripped"
        );

        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        let text = creds_text(&seed);
        let d = dir_with(&[("nats.creds", &text)]);
        let auth = NatsAuth::from_dir(d.path()).unwrap();
        assert_eq!(auth.kind(), "credentials file");
        assert_eq!(auth.secret_data()["nats.creds"], text);
        auth.apply(ConnectOptions::new()).unwrap();
    }

    #[test]
    fn half_configured_or_ambiguous_directories_say_what_is_wrong() {
        let err = |files: &[(&str, &str)]| {
            let d = dir_with(files);
            NatsAuth::from_dir(d.path()).unwrap_err().to_string()
        };
        let e = err(&[("username", "ops")]);
        assert!(e.contains("has `username` but no `password`"), "{e}");
        let e = err(&[("password", "pw-secret-1")]);
        assert!(e.contains("has `password` but no `username`"), "{e}");
        assert!(!e.contains("pw-secret-1"), "{e}");
        let e = err(&[
            ("token", "tok-secret-1"),
            ("username", "u"),
            ("password", "p"),
        ]);
        assert!(e.contains("`password`, `token`, `username` at once"), "{e}");
        assert!(!e.contains("tok-secret-1"), "{e}");
        let e = err(&[("other", "x")]);
        assert!(e.contains("holds none of these files"), "{e}");
        assert!(e.contains("`token`, or `username` and `password`"), "{e}");
        let e = err(&[("token", "\n")]);
        assert!(e.contains("NATS token") && e.contains("is empty"), "{e}");
        let e = err(&[("username", "u"), ("password", "")]);
        assert!(
            e.contains("the NATS password") && e.contains("is empty"),
            "{e}"
        );

        let e = NatsAuth::from_dir(Path::new("/nonexistent/openwop-nats"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/openwop-nats: does not exist"),
            "{e}"
        );
    }

    #[test]
    fn unreadable_oversized_and_binary_files_are_refused_by_name() {
        let d = dir_with(&[]);
        std::fs::write(d.path().join("token"), [0xff, 0xfe, 0x00]).unwrap();
        let e = NatsAuth::from_dir(d.path()).unwrap_err().to_string();
        assert!(e.contains("token") && e.contains("not UTF-8 text"), "{e}");

        std::fs::write(d.path().join("token"), "x".repeat(70 * 1024)).unwrap();
        let e = NatsAuth::from_dir(d.path()).unwrap_err().to_string();
        assert!(e.contains("larger than 64 KiB"), "{e}");

        // A directory where a file should be.
        std::fs::remove_file(d.path().join("token")).unwrap();
        std::fs::create_dir(d.path().join("token")).unwrap();
        let e = NatsAuth::from_dir(d.path()).unwrap_err().to_string();
        assert!(e.contains("cannot read NATS credentials file"), "{e}");

        let e = NatsAuth::from_creds_file(Path::new("/nonexistent/x.creds"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/x.creds: no such file"), "{e}");
    }

    #[test]
    fn malformed_credentials_files_never_quote_the_seed() {
        let d = dir_with(&[("nats.creds", "just some text SUSECRETSEEDVALUE")]);
        let e = NatsAuth::from_dir(d.path()).unwrap_err().to_string();
        assert!(e.contains("it has no user JWT block"), "{e}");
        assert!(!e.contains("SUSECRETSEEDVALUE"), "{e}");

        let bad = creds_text("SUSECRETSEEDVALUENOTANNKEY");
        let d = dir_with(&[("nats.creds", &bad)]);
        let e = NatsAuth::from_dir(d.path()).unwrap_err().to_string();
        assert!(e.contains("malformed"), "{e}");
        assert!(!e.contains("SUSECRETSEEDVALUE"), "{e}");
    }

    #[test]
    fn debug_output_never_shows_a_secret() {
        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        for auth in [
            NatsAuth::Token(Secret::new("tok-very-secret")),
            NatsAuth::UserPassword {
                user: "ops".into(),
                password: Secret::new("pw-very-secret"),
            },
            NatsAuth::Credentials {
                source: "/x/nats.creds".into(),
                contents: Secret::new(creds_text(&seed)),
            },
        ] {
            let dbg = format!("{auth:?} {auth:#?}");
            assert!(dbg.contains("[REDACTED]"), "{dbg}");
            assert!(!dbg.contains("very-secret"), "{dbg}");
            assert!(!dbg.contains(&seed), "{dbg}");
        }
    }
}
