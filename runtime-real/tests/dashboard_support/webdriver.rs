//! A small W3C WebDriver client (chromedriver over HTTP, reqwest), enough
//! to drive the dashboard headless: navigate, run scripts, wait on the
//! page with a bound (an async script resolved by a MutationObserver, so
//! the wait is on the DOM changing, not on a timer), keys, screenshots.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A chromedriver process and one headless Chromium session.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

/// chromedriver on PATH, or why not.
pub fn chromedriver() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("chromedriver"))
            .find(|p| p.is_file())
    })
}

impl Browser {
    /// Starts chromedriver (its "started successfully" line is the event
    /// waited on) and a headless session at a fixed viewport.
    pub async fn start(bound: Duration) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let binary =
            chromedriver().expect("chromedriver is not on PATH (apt-get install chromium-driver)");
        let mut driver = Command::new(binary)
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = driver.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("started successfully") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(bound).expect("chromedriver did not start");
        let http = super::http();
        let base = format!("http://127.0.0.1:{port}");
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,900"],
            },
        }}});
        let answer: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_owned();
        Browser {
            driver,
            base,
            session,
            http,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut request = self.http.request(method, url);
        if !body.is_null() {
            request = request.json(&body);
        }
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        answer["value"].clone()
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.call(reqwest::Method::POST, path, body).await
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        let v = self.post("/url", json!({ "url": url })).await;
        assert!(v.is_null(), "navigating to the page: {v}");
    }

    /// Runs `script` (a function body) and returns its value.
    pub async fn js(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({ "script": script, "args": [] }))
            .await
    }

    /// Waits, at most `bound`, until the JS expression `condition` holds,
    /// re-checked on every DOM change; panics with `dump` (a JS expression)
    /// when it does not.
    pub async fn wait(&self, bound: Duration, condition: &str, dump: &str) {
        let ms = bound.as_millis() as u64;
        self.post("/timeouts", json!({ "script": ms })).await;
        let script = r#"
            const done = arguments[arguments.length - 1];
            const f = new Function("return (" + arguments[0] + ");");
            let obs = null;
            const check = () => {
                let ok = false;
                try { ok = !!f(); } catch (e) { ok = false; }
                if (ok) { if (obs) obs.disconnect(); done(true); }
                return ok;
            };
            if (!check()) {
                obs = new MutationObserver(check);
                obs.observe(document.documentElement, { subtree: true, childList: true, attributes: true, characterData: true });
            }
        "#;
        let v = self
            .post(
                "/execute/async",
                json!({ "script": script, "args": [condition] }),
            )
            .await;
        if v != json!(true) {
            let state = self.js(&format!("return {dump};")).await;
            panic!("the page did not reach `{condition}` within {bound:?}: {v}\npage: {state}");
        }
    }

    /// Presses and releases one key (WebDriver key codes: "\u{E004}" Tab,
    /// "\u{E007}" Enter, "\u{E00C}" Escape) on whatever has focus.
    pub async fn key(&self, key: &str) {
        let actions = json!({ "actions": [{ "type": "key", "id": "keyboard", "actions": [
            { "type": "keyDown", "value": key }, { "type": "keyUp", "value": key },
        ]}]});
        let v = self.post("/actions", actions).await;
        assert!(v.is_null(), "keys: {v}");
    }

    /// Types `text` on whatever has focus, a key per character.
    pub async fn type_text(&self, text: &str) {
        let keys: Vec<Value> = text
            .chars()
            .flat_map(|c| {
                let c = c.to_string();
                [
                    json!({ "type": "keyDown", "value": c }),
                    json!({ "type": "keyUp", "value": c }),
                ]
            })
            .collect();
        let actions = json!({ "actions": [{ "type": "key", "id": "keyboard", "actions": keys }]});
        let v = self.post("/actions", actions).await;
        assert!(v.is_null(), "typing: {v}");
    }

    /// Tabs (at most `max` times) until `condition` (JS) holds of the
    /// focused element `document.activeElement`.
    pub async fn tab_to(&self, condition: &str, max: usize) {
        for _ in 0..max {
            if self
                .js(&format!(
                    "const el = document.activeElement; return !!({condition});"
                ))
                .await
                == json!(true)
            {
                return;
            }
            self.key("\u{E004}").await;
        }
        panic!("`{condition}` never had the focus after {max} tabs");
    }

    /// The text of the open `confirm` dialog, which is then accepted.
    pub async fn accept_dialog(&self) -> String {
        let text = self
            .call(reqwest::Method::GET, "/alert/text", Value::Null)
            .await;
        let v = self.post("/alert/accept", json!({})).await;
        assert!(v.is_null(), "accepting the dialog: {v}");
        text.as_str()
            .unwrap_or_else(|| panic!("no dialog open: {text}"))
            .to_owned()
    }

    /// Opens a new window on `url` and makes it the current one.
    pub async fn open_window(&self, url: &str) {
        let v = self.post("/window/new", json!({ "type": "window" })).await;
        let handle = v["handle"]
            .as_str()
            .unwrap_or_else(|| panic!("no new window: {v}"))
            .to_owned();
        self.switch_to(&handle).await;
        self.goto(url).await;
    }

    /// Closes the current window (switch to another before the next call).
    pub async fn close_window(&self) {
        let v = self
            .call(reqwest::Method::DELETE, "/window", Value::Null)
            .await;
        assert!(v.is_array(), "closing a window: {v}");
    }

    /// Every window's handle, in the order WebDriver gives them.
    pub async fn windows(&self) -> Vec<String> {
        let v = self
            .call(reqwest::Method::GET, "/window/handles", Value::Null)
            .await;
        (v.as_array()
            .unwrap_or_else(|| panic!("no handles: {v}"))
            .iter())
        .filter_map(|h| h.as_str().map(str::to_owned))
        .collect()
    }

    /// Makes window `handle` the current one.
    pub async fn switch_to(&self, handle: &str) {
        let v = self.post("/window", json!({ "handle": handle })).await;
        assert!(v.is_null(), "switching windows: {v}");
    }

    /// A PNG of the viewport, written to `path`.
    pub async fn screenshot(&self, path: &std::path::Path) {
        use base64_decode as decode;
        let v = self
            .call(reqwest::Method::GET, "/screenshot", Value::Null)
            .await;
        let png = decode(v.as_str().unwrap_or_else(|| panic!("no screenshot: {v}")));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// Ends the session and chromedriver.
    pub async fn quit(mut self) {
        let _ = self.call(reqwest::Method::DELETE, "", Value::Null).await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Standard base64 (what WebDriver's screenshot answers) to bytes.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let digits: Vec<u32> = text.bytes().filter_map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let mut n = 0u32;
        for (i, d) in chunk.iter().enumerate() {
            n |= d << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len().saturating_sub(1)]);
    }
    out
}
