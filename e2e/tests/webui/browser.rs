//! Headless Chromium from Debian (`chromium` + `chromium-driver`) driven over WebDriver with
//! fantoccini: one chromedriver process per browser, a fresh profile each, the flags a closed
//! network needs (no background networking, updates or sync; otherwise the browser hangs).

use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// The system browser and driver (`OPENWOP_E2E_CHROMIUM` / `OPENWOP_E2E_CHROMEDRIVER` override).
fn system(var: &str, names: &[&str]) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return p.into();
    }
    for n in names {
        for dir in ["/usr/bin", "/usr/local/bin", "/usr/lib/chromium"] {
            let p = PathBuf::from(dir).join(n);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "{} not found: install Debian's chromium and chromium-driver (`apt-get install -y chromium chromium-driver`; .ci/run does) or set {var}",
        names[0]
    )
}

pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
    /// The operator's base URL (`http://127.0.0.1:<port>`).
    pub base: String,
}

impl Browser {
    /// A fresh headless browser (empty profile: no cookie) at `base`; `dark` asks for
    /// `prefers-color-scheme: dark`.
    pub async fn start(base: &str, dark: bool) -> Browser {
        let chromium = system("OPENWOP_E2E_CHROMIUM", &["chromium", "chromium-browser"]);
        let driver_bin = system("OPENWOP_E2E_CHROMEDRIVER", &["chromedriver"]);
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Its own process group: the browser it starts goes with it (see Drop).
        let driver = Command::new(&driver_bin)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver_bin.display()));
        let profile = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--headless".to_owned(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1400,1000".into(),
            // performance.memory in whole bytes (the bench's heap figure).
            "--enable-precise-memory-info".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        if dark {
            args.push("--force-dark-mode".into());
            args.push("--blink-settings=preferredColorScheme=0".into());
        }
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let caps = caps.as_object().unwrap().clone();
        let url = format!("http://127.0.0.1:{port}");
        let mut last = None;
        for _ in 0..50 {
            match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Browser {
                        client,
                        driver,
                        _profile: profile,
                        base: base.to_owned(),
                    };
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("chromedriver did not start a browser: {last:?}")
    }

    pub async fn goto(&self, path: &str) {
        self.client
            .goto(&format!("{}{path}", self.base))
            .await
            .unwrap_or_else(|e| panic!("goto {path}: {e}"));
    }

    /// The first element matching `css`, waiting up to `secs`.
    pub async fn wait(&self, css: &str, secs: u64) -> fantoccini::elements::Element {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            if let Ok(e) = self.client.find(Locator::Css(css)).await {
                return e;
            }
            if tokio::time::Instant::now() > deadline {
                let body = self.text("body").await.unwrap_or_default();
                panic!("no {css} within {secs}s; page text:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// Waits until the text of `css` satisfies `f`, and returns it.
    pub async fn wait_text(&self, css: &str, secs: u64, f: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(t) = self.text(css).await
                && f(&t)
            {
                return t;
            }
            if tokio::time::Instant::now() > deadline {
                let t = self.text(css).await;
                let body = self.text("body").await.unwrap_or_default();
                panic!("{css} text not as expected within {secs}s: {t:?}; page text:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    pub async fn text(&self, css: &str) -> Option<String> {
        self.client
            .find(Locator::Css(css))
            .await
            .ok()?
            .text()
            .await
            .ok()
    }

    pub async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map(|v| v.len())
            .unwrap_or(0)
    }

    pub async fn click(&self, css: &str) {
        self.wait(css, 30)
            .await
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self.wait(css, 30).await;
        e.send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    pub async fn js(&self, script: &str) -> Value {
        self.client
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Runs `script` (its last argument is the callback) and returns what it passes back.
    pub async fn js_async(&self, script: &str) -> Value {
        self.client
            .execute_async(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("async script failed: {e}\n{script}"))
    }

    /// Logs in through the page's form.
    pub async fn login(&self, token: &str) {
        self.goto("/ui/").await;
        self.type_into("#token", token).await;
        self.click("#login").await;
        self.wait("#user", 30).await;
    }

    /// The session cookie's value (WebDriver sees HttpOnly cookies; the page cannot).
    pub async fn session_cookie(&self) -> Option<String> {
        self.client
            .get_all_cookies()
            .await
            .ok()?
            .into_iter()
            .find(|c| c.name() == "openwop-session")
            .map(|c| c.value().to_owned())
    }

    pub async fn screenshot(&self, path: &std::path::Path) {
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    /// Ends the WebDriver session (the browser quits), then the driver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    /// Also on a failed assertion: the driver's process group (driver and browser) is killed.
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group this struct created; no memory is involved.
        unsafe {
            libc::kill(-(self.driver.id() as i32), libc::SIGKILL);
        }
        let _ = self.driver.wait();
    }
}
