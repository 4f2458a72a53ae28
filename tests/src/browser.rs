//! A real headless Chromium for the tests, driven over WebDriver (`chromedriver`, Debian's
//! `chromium-driver`) with plain HTTP: open a page, run a script in it, read what it returns.
//! `scripts/test` installs both packages; without them a browser test fails and says so.

use std::{process::Stdio, time::Duration};

use serde_json::{Value, json};

pub struct Browser {
    driver: tokio::process::Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

fn binary(names: &[&str]) -> Option<String> {
    let path = std::env::var("PATH").unwrap_or_default();
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
            .map(|p| p.display().to_string())
    })
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session.
    pub async fn start() -> Browser {
        Self::start_with(true).await
    }

    /// Starts a headless Chromium session in which pages run no JavaScript (WebDriver's own
    /// commands still work): for pages that must work without it.
    pub async fn start_without_javascript() -> Browser {
        Self::start_with(false).await
    }

    async fn start_with(javascript: bool) -> Browser {
        let driver_path = binary(&["chromedriver"]).expect(
            "the browser tests need chromedriver and chromium (apt-get install chromium chromium-driver)",
        );
        let chromium = binary(&["chromium", "chromium-browser", "google-chrome"])
            .expect("the browser tests need chromium (apt-get install chromium)");
        let port = crate::free_port();
        // A process group of its own, so that Chromium goes with chromedriver even when a test
        // panics before `stop` (see `Drop`).
        let driver = tokio::process::Command::new(driver_path)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--no-first-run", "--disable-extensions"],
                // 2: blocked, for every site.
                "prefs": {"profile.managed_default_content_settings.javascript": if javascript { 1 } else { 2 }},
            },
        }}});
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let session = loop {
            match http.post(format!("{base}/session")).json(&capabilities).send().await {
                Ok(response) => {
                    let body: Value = response.json().await.expect("a WebDriver answer");
                    match body["value"]["sessionId"].as_str() {
                        Some(id) => break id.to_owned(),
                        None => panic!("chromedriver refused a session: {body}"),
                    }
                }
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("chromedriver did not start: {e}"),
            }
        };
        Browser { driver, base, session, http }
    }

    async fn command(&self, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}/{path}", self.base, self.session);
        let answer: Value =
            self.http.post(url).json(&body).send().await.expect("chromedriver").json().await.unwrap();
        if answer["value"]["error"].is_string() {
            panic!("WebDriver {path}: {}", answer["value"]);
        }
        answer["value"].clone()
    }

    async fn read(&self, path: &str) -> Value {
        let url = format!("{}/session/{}/{path}", self.base, self.session);
        let answer: Value = self.http.get(url).send().await.expect("chromedriver").json().await.unwrap();
        if answer["value"]["error"].is_string() {
            panic!("WebDriver {path}: {}", answer["value"]);
        }
        answer["value"].clone()
    }

    /// The page's title.
    pub async fn title(&self) -> String {
        self.read("title").await.as_str().unwrap_or_default().to_owned()
    }

    /// The URL the page is at.
    pub async fn current_url(&self) -> String {
        self.read("url").await.as_str().unwrap_or_default().to_owned()
    }

    /// The WebDriver id of the first element matching `css`, if there is one.
    pub async fn find(&self, css: &str) -> Option<String> {
        let url = format!("{}/session/{}/element", self.base, self.session);
        let answer: Value = self
            .http
            .post(url)
            .json(&json!({"using": "css selector", "value": css}))
            .send()
            .await
            .expect("chromedriver")
            .json()
            .await
            .unwrap();
        answer["value"]["element-6066-11e4-a52e-4f735466cecf"].as_str().map(str::to_owned)
    }

    /// The rendered text of the first element matching `css` (panics if there is none).
    pub async fn text(&self, css: &str) -> String {
        let element = self.find(css).await.unwrap_or_else(|| panic!("no element matches `{css}`"));
        self.read(&format!("element/{element}/text")).await.as_str().unwrap_or_default().to_owned()
    }

    /// Clicks the first element matching `css`, as a user would (panics if there is none).
    pub async fn click(&self, css: &str) {
        let element = self.find(css).await.unwrap_or_else(|| panic!("no element matches `{css}`"));
        self.command(&format!("element/{element}/click"), json!({})).await;
    }

    /// Opens `url` and waits for it to load.
    pub async fn goto(&self, url: &str) {
        self.command("url", json!({ "url": url })).await;
    }

    /// Runs `script` (a function body; `return` gives the value) in the page.
    pub async fn eval(&self, script: &str) -> Value {
        self.command("execute/sync", json!({ "script": script, "args": [] })).await
    }

    /// Polls `script` every 50 ms until it returns something other than null or false; that value.
    pub async fn wait_for(&self, what: &str, timeout: Duration, script: &str) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let value = self.eval(script).await;
            if !value.is_null() && value != Value::Bool(false) {
                return value;
            }
            if tokio::time::Instant::now() >= deadline {
                let log = self.eval("return JSON.stringify(window.herald ?? null)").await;
                panic!("timed out after {timeout:?} waiting for {what}; the page's record: {log}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn stop(self) {
        let url = format!("{}/session/{}", self.base, self.session);
        let _ = self.http.delete(url).send().await;
        // Drop ends the processes.
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(pid) = self.driver.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stderr(Stdio::null())
                .status();
        }
    }
}
