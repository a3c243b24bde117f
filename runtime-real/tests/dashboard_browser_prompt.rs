//! The dashboard's prompt box in a real browser against a real pipeline:
//! `drover up` serves TinyStories 260K on two local stages; in headless
//! Chromium a prompt is typed into the page, sent by keyboard, and its
//! answer streams in: the text `drover-worker generate` prints on the whole
//! model. Every wait is on the page's DOM changing (or a line, an exit),
//! bounded.

mod dashboard_support;
mod up_support;

use dashboard_support::webdriver::Browser;
use std::time::Duration;
use up_support::*;

const SERVE: Duration = Duration::from_secs(120);
const ANSWER: Duration = Duration::from_secs(60);
const EXIT: Duration = Duration::from_secs(60);
const PAGE: Duration = Duration::from_secs(30);
const DUMP: &str = "JSON.stringify({answer: document.getElementById('answer').textContent, \
    state: document.getElementById('answer').dataset.state, \
    send: document.getElementById('prompt-send').disabled, \
    notice: document.getElementById('notice').textContent})";

#[test]
fn a_prompt_typed_into_the_page_streams_the_models_answer() {
    let dir = scratch("dash-prompt");
    let state = dir.join("state");
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, pipeline_plan_text(2, "true", "")).unwrap();
    let mut up = Up::start(&state, &plan);
    let url = up.wait_line(SERVE, |l| l["event"] == "dashboard")["url"]
        .as_str()
        .unwrap()
        .to_owned();
    up.wait_line(SERVE, |l| l["event"] == "serving");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let answer = rt.block_on(async {
        let browser = Browser::start(PAGE).await;
        browser.goto(&url).await;
        browser
            .wait(
                PAGE,
                "!document.getElementById('prompt-send').disabled",
                DUMP,
            )
            .await;
        browser
            .js("document.getElementById('prompt-max').value = '24'; return null;")
            .await;
        // Keyboard only: Tab to the box, type, Tab to Send, Enter.
        browser
            .js("document.activeElement && document.activeElement.blur(); return null;")
            .await;
        browser.tab_to("el.id === 'prompt-text'", 80).await;
        browser.type_text("Once upon a time").await;
        browser.tab_to("el.id === 'prompt-send'", 4).await;
        browser.key("\u{E007}").await;
        browser
            .wait(
                ANSWER,
                "document.getElementById('answer').dataset.state === 'done'",
                DUMP,
            )
            .await;
        let answer = browser
            .js("return document.getElementById('answer').textContent;")
            .await;
        // The serving panel counts the pipeline's repairs: none here.
        let repairs = browser
            .js("return document.querySelector('#serving [data-k=\"repairs\"] dd').textContent;")
            .await;
        assert_eq!(repairs, "0", "the serving panel's repairs");
        browser.quit().await;
        answer.as_str().unwrap().to_owned()
    });
    // `generate` ends its text with one newline; the stream has none.
    assert_eq!(
        answer,
        generated("Once upon a time", 24).trim_end_matches('\n')
    );
    assert!(answer.len() > 20, "{answer}");
    up.type_stop();
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}
