//! A headless Chromium session over WebDriver (Debian's `chromium` and
//! `chromium-driver`, through `fantoccini`): what the browser tests and
//! the page-drawing bench drive. `CHROMIUM` and `CHROMEDRIVER` name other
//! binaries.

use fantoccini::{Client, ClientBuilder, Locator};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A chromedriver process and a headless Chromium session through it.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    /// Kills chromedriver with the Chromium it started: the driver runs in
    /// a process group of its own, and the whole group goes (killing the
    /// driver alone would leave the browser running).
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Browser {
    /// Starts chromedriver and a headless Chromium window of 1400×1000.
    pub async fn start() -> Browser {
        let port = free_port();
        let driver_bin = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {driver_bin}: {e}"));
        let profile = tempfile::tempdir().unwrap();
        let browser_bin = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": browser_bin,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let start = Instant::now();
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(c) => break c,
                Err(e) => {
                    assert!(
                        start.elapsed() < Duration::from_secs(30),
                        "cannot start a browser session: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    /// Opens `url` and waits for its document.
    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// Clicks the element `locator` finds.
    pub async fn click(&self, locator: Locator<'_>) {
        self.client
            .find(locator)
            .await
            .unwrap_or_else(|e| panic!("nothing to click at {locator:?}: {e}"))
            .click()
            .await
            .unwrap();
    }

    /// The texts of every element matching `css`, read in one script so
    /// that a page swapping its contents (the live pages do) cannot leave
    /// a found element stale before its text is asked for.
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let found = self
            .client
            .execute(
                "return [...document.querySelectorAll(arguments[0])]\
                 .map(e => e.innerText.trim());",
                vec![serde_json::json!(css)],
            )
            .await
            .unwrap();
        serde_json::from_value(found).unwrap()
    }

    /// The text of the first element matching `css` (read as `texts` is).
    pub async fn text(&self, css: &str) -> String {
        self.texts(css)
            .await
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no {css} on the page"))
    }

    /// Runs `script` in the page (a function body; `arguments[0]` is a
    /// callback for async scripts when `run_async`).
    pub async fn js(&self, script: &str) -> serde_json::Value {
        self.client.execute(script, vec![]).await.unwrap()
    }

    /// The path and query of the page shown.
    pub async fn location(&self) -> String {
        let url = self.client.current_url().await.unwrap();
        match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        }
    }

    /// Saves a screenshot named `name` under `target/ui-screenshots/`, and
    /// under the directory `BALLISTA_JOB_HISTORY_SCREENSHOTS` names when set
    /// (the README's pictures are made with
    /// `BALLISTA_JOB_HISTORY_SCREENSHOTS=docs/images`).
    pub async fn shot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots")];
        if let Some(dir) = std::env::var_os("BALLISTA_JOB_HISTORY_SCREENSHOTS") {
            dirs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir));
        }
        for dir in dirs {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
        }
    }

    /// Waits until `script` (an expression) is true in the page.
    pub async fn until(&self, what: &str, script: &str) {
        let start = Instant::now();
        loop {
            let v = self.js(&format!("return !!({script});")).await;
            if v == serde_json::Value::Bool(true) {
                return;
            }
            if start.elapsed() > Duration::from_secs(60) {
                let shown = self.js("return document.body.innerText;").await;
                panic!("timed out waiting for {what}; the page shows: {shown}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
