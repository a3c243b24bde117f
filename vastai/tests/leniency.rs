//! Over HTTP: the fake takes every value form the real API takes (numeric
//! strings, `"true"`/`"false"`), and what it cannot read is a 400 in the real
//! API's shape naming the field and the value, never an empty answer or a
//! silent success. Searches, creates, lists, labels and bulk destroys.

mod common;

use common::*;
use serde_json::{Value, json};

struct Http {
    http: reqwest::Client,
    base: String,
}

impl Http {
    fn new(w: &World) -> Http {
        vastai::client::install_crypto_provider();
        Http {
            http: reqwest::Client::new(),
            base: w.fake.base_url(),
        }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(KEY);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().await.unwrap();
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap())
    }

    async fn search(&self, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, "/api/v0/bundles/", Some(body))
            .await
    }
}

#[tokio::test]
async fn search_takes_strings_and_answers_400_naming_what_it_cannot_read() {
    let w = world().await;
    let http = Http::new(&w);
    let (status, found) = http
        .search(json!({"num_gpus": {"gte": "1"}, "verified": {"eq": "true"},
                       "dph_total": {"lte": "0.3"}, "limit": "10", "allocated_storage": "5",
                       "order": [["dph_total", "asc"]], "type": "on-demand"}))
        .await;
    assert_eq!(status, 200, "{found}");
    let ids: Vec<u64> = found["offers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, vec![18_422_350, 18_422_320], "{found}");
    let (status, refusal) = http.search(json!({"num_gpus": {"gte": "abc"}})).await;
    assert_eq!(status, 400);
    assert_eq!(refusal["error"], "invalid_request", "{refusal}");
    let msg = refusal["msg"].as_str().unwrap();
    assert!(msg.contains("num_gpus") && msg.contains("\"abc\""), "{msg}");
    // The newer search reads the same filters the same way.
    let (status, refusal) = http
        .send(
            reqwest::Method::PUT,
            "/api/v0/search/asks/",
            Some(json!({"select_cols": ["*"], "q": {"verified": {"is": true}}})),
        )
        .await;
    assert_eq!(status, 400, "{refusal}");
    assert!(
        refusal["msg"].as_str().unwrap().contains("\"is\""),
        "{refusal}"
    );
}

#[tokio::test]
async fn create_label_list_and_bulk_destroy_take_what_the_cli_sends() {
    let w = world().await;
    let http = Http::new(&w);
    let ask = |id: u64| format!("/api/v0/asks/{id}/");
    // What `vastai create instance` sends, with numbers and booleans as text.
    let cli_body = json!({"client_id": "me", "image": "ubuntu:22.04", "env": {"A": "B"},
        "price": null, "disk": "20", "label": null, "extra": null, "onstart": null,
        "image_login": null, "python_utf8": false, "lang_utf8": false, "use_jupyter_lab": false,
        "jupyter_dir": null, "force": false, "cancel_unavail": "false", "template_hash_id": null,
        "user": null, "runtype": "ssh"});
    let (status, made) = http
        .send(reqwest::Method::PUT, &ask(18_422_311), Some(cli_body))
        .await;
    assert_eq!(status, 200, "{made}");
    let id = made["new_contract"].as_u64().unwrap();
    assert_eq!(w.backend.log().started[0].disk_gb, 20);
    for (field, value) in [("disk", json!("big")), ("cancel_unavail", json!("perhaps"))] {
        let mut body = json!({"image": "x"});
        body[field] = value.clone();
        let (status, refusal) = http
            .send(reqwest::Method::PUT, &ask(18_422_312), Some(body))
            .await;
        assert_eq!(status, 400, "{refusal}");
        let msg = refusal["msg"].as_str().unwrap();
        assert!(
            msg.contains(field) && msg.contains(&value.to_string()),
            "{msg}"
        );
    }
    let instance = format!("/api/v0/instances/{id}/");
    let (status, _) = http
        .send(
            reqwest::Method::PUT,
            &instance,
            Some(json!({"label": "renamed"})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(w.fake.instances()[0].label, "renamed");
    // A label that is not text is refused, not taken as nothing.
    let (status, refusal) = http
        .send(
            reqwest::Method::PUT,
            &instance,
            Some(json!({"label": ["x"]})),
        )
        .await;
    assert_eq!(status, 400, "{refusal}");
    assert!(
        refusal["msg"].as_str().unwrap().contains("label"),
        "{refusal}"
    );
    let (status, refusal) = http
        .send(
            reqwest::Method::PUT,
            &instance,
            Some(json!({"state": "paused"})),
        )
        .await;
    assert_eq!(status, 400, "{refusal}");
    assert!(
        refusal["msg"].as_str().unwrap().contains("paused"),
        "{refusal}"
    );
    assert_eq!(w.fake.instances()[0].label, "renamed");
    // The list filters with the same reading: an id as text.
    let filtered = format!(
        "/api/v1/instances/?select_filters={}",
        urlencode(&json!({"id": {"eq": id.to_string()}}).to_string())
    );
    let (status, listed) = http.send(reqwest::Method::GET, &filtered, None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["instances"][0]["id"].as_u64(), Some(id), "{listed}");
    let unreadable = format!(
        "/api/v1/instances/?select_filters={}",
        urlencode(&json!({"id": {"eq": "seven"}}).to_string())
    );
    let (status, refusal) = http.send(reqwest::Method::GET, &unreadable, None).await;
    assert_eq!(status, 400, "{refusal}");
    assert!(
        refusal["msg"].as_str().unwrap().contains("seven"),
        "{refusal}"
    );
    // Bulk destroy with ids as text.
    let (status, done) = http
        .send(
            reqwest::Method::DELETE,
            "/api/v0/instances/",
            Some(json!({"instance_ids": [id.to_string()]})),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["destroyed"], json!([id]));
    assert!(w.fake.instances()[0].destroyed);
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}
