//! The dashboard in a real browser: headless Chromium (Debian's `chromium`
//! and `chromium-driver`) driven over WebDriver against a real `drover up`
//! of three local nodes. The page shows the nodes ready and the counter
//! full; a card's log tail equals `drover logs NODE`, also after a forced
//! reconnect that resumes with the last event id (no gap, no duplicate);
//! the full log, opened by keyboard only, equals `drover logs NODE` line
//! for line; the theme toggles by keyboard and persists; +1 for the group,
//! by keyboard, after its question, brings a fourth node up (4/4); seven
//! windows share one stream, and the 7th loads and shows the fleet;
//! removing a node from the page, by keyboard, after its question, turns
//! its card Destroyed and the counter to 3/4; stopping the run from the page turns every card
//! Destroyed through the open stream and `up` exits 0. Screenshots in
//! light and dark go to `target/tmp/dashboard-screenshots/` for review.
//! Every wait is on the page's DOM changing (or a line, an exit), bounded.

mod dashboard_support;
mod up_support;

use dashboard_support::webdriver::Browser;
use dashboard_support::*;
use std::time::Duration;
use up_support::*;

const SETTLE: Duration = Duration::from_secs(90);
const EXIT: Duration = Duration::from_secs(60);
const PAGE: Duration = Duration::from_secs(30);
const DUMP: &str = "JSON.stringify({counts: window.__dash && __dash.counts, hellos: window.__dash && __dash.hellos, \
    cards: [...document.querySelectorAll('.card')].map(c => c.dataset.node + ':' + c.dataset.stage + ':' + ((c.querySelector('[data-f=\"failure\"]') || {}).textContent || '')), \
    groups: document.getElementById('groups') && document.getElementById('groups').textContent, \
    body: document.body.innerText.slice(0, 400)})";

/// The text `drover logs NODE` prints, without its last newline.
fn logs_of(state: &std::path::Path, node: &str) -> String {
    let out = drover(state, &["logs", node]);
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .trim_end_matches('\n')
        .to_owned()
}

/// The last 200 lines of `text` (what a card's tail keeps).
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(200)..].join("\n")
}

#[test]
fn the_page_follows_the_fleet_in_headless_chromium() {
    let dir = scratch("dash-browser");
    let state = dir.join("state");
    let plan = write_plan(&dir, &local_plan(3));
    // The page is the subject here, not liveness (tests/liveness.rs): a
    // browser starting on a small, busy machine must not look like three
    // agents dying.
    let mut text = std::fs::read_to_string(&plan).unwrap();
    text.push_str("\n[liveness]\nsuspect_after = \"10s\"\ndead_after = \"60s\"\n");
    std::fs::write(&plan, text).unwrap();
    let mut up = Up::start(&state, &plan);
    let line = up.wait_line(SETTLE, |l| l["event"] == "dashboard");
    let url = line["url"].as_str().unwrap().to_owned();
    let (base, _) = split_url(&url);
    up.wait_line(SETTLE, |l| l["event"] == "settled");
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let browser = Browser::start(PAGE).await;
        // Without the token the page is refused.
        browser.goto(&format!("{base}/")).await;
        let body = browser.js("return document.body.innerText;").await;
        assert!(body.as_str().unwrap().contains("missing or wrong dashboard token"), "{body}");

        browser.goto(&url).await;
        browser
            .wait(
                SETTLE,
                "document.querySelectorAll('.card[data-stage=\"Dormant\"][data-ready=\"true\"]').length === 3 \
                 && document.querySelector('#groups li[data-group=\"workers\"] .count').textContent === '3/3'",
                DUMP,
            )
            .await;
        let card = browser
            .js("const c = document.querySelector('.card[data-node=\"workers-0\"]'); \
                 return [c.querySelector('[data-f=\"provider\"]').textContent, \
                         c.querySelector('[data-f=\"lease\"]').textContent, \
                         c.querySelector('[data-f=\"group\"]').textContent, \
                         c.querySelector('[data-f=\"endpoint\"]').textContent];")
            .await;
        assert_eq!(card[0], "local", "{card}");
        let header = browser
            .js("return [document.getElementById('cost').textContent, document.getElementById('accrued').textContent];")
            .await;
        assert_eq!(header[0], "$0.00/h", "{header}");
        assert_eq!(header[1], "$0.00 so far", "{header}");
        assert!(card[1].as_str().unwrap().starts_with("local:"), "{card}");
        assert_eq!(card[2], "workers", "{card}");
        assert!(card[3].as_str().unwrap().starts_with("127.0.0.1:"), "{card}");

        // The card's tail is `drover logs`; still so after a reconnect
        // that resumes after the last id (a replay: nothing lost, nothing
        // twice).
        let expected = logs_of(&state, "workers-0");
        // Tails are written once a frame: read what the page applied.
        let tail_js = "__dash.flushTails(); return document.querySelector('.card[data-node=\"workers-0\"] .tail').textContent;";
        assert_eq!(browser.js(tail_js).await, tail(&expected));
        browser.js("__dash.reconnect(); return null;").await;
        browser
            .wait(
                PAGE,
                "__dash.hellos.length >= 2 && __dash.hellos[__dash.hellos.length - 1].mode === 'replay'",
                DUMP,
            )
            .await;
        let after = browser
            .js("return [__dash.gaps.length, __dash.duplicates, __dash.hellos[__dash.hellos.length - 1].resumed_from === __dash.lastId || __dash.applied > 0];")
            .await;
        assert_eq!(after[0], 0, "no gap on a resume: {after}");
        assert_eq!(after[1], 0, "no line twice: {after}");
        assert_eq!(browser.js(tail_js).await, tail(&logs_of(&state, "workers-0")));

        // Keyboard only: Tab to the card, Enter opens the full log, which
        // is `drover logs NODE` line for line; Escape closes it.
        browser.js("document.activeElement && document.activeElement.blur(); return null;").await;
        browser.tab_to("el.dataset && el.dataset.node === 'workers-0' && el.classList.contains('card')", 40).await;
        browser.key("\u{E007}").await;
        browser
            .wait(PAGE, "document.getElementById('logview').open && document.getElementById('logview').dataset.loaded === 'true'", DUMP)
            .await;
        let full = browser.js("return document.getElementById('logtext').textContent;").await;
        assert_eq!(
            full.as_str().unwrap().trim_end_matches('\n'),
            logs_of(&state, "workers-0")
        );
        browser.key("\u{E00C}").await;
        browser.wait(PAGE, "!document.getElementById('logview').open", DUMP).await;

        // The theme toggle, by keyboard; the choice persists.
        browser.js("document.activeElement && document.activeElement.blur(); return null;").await;
        browser.tab_to("el.id === 'theme'", 40).await;
        browser.js("document.documentElement.dataset.theme = 'light'; return null;").await;
        browser.screenshot(&shots.join("light.png")).await;
        browser.key("\u{E007}").await;
        browser.wait(PAGE, "document.documentElement.dataset.theme === 'dark'", DUMP).await;
        assert_eq!(browser.js("return localStorage.getItem('drover-theme');").await, "dark");
        browser.screenshot(&shots.join("dark.png")).await;
        assert!(std::fs::metadata(shots.join("dark.png")).unwrap().len() > 1000);

        // +1 for the group by keyboard: its button, Enter, the question
        // answered; a fourth node is rented and comes up, 4 of 4.
        browser.js("document.activeElement && document.activeElement.blur(); return null;").await;
        browser
            .tab_to("el.classList.contains('plus') && el.closest('li').dataset.group === 'workers'", 40)
            .await;
        let label = browser.js("return document.activeElement.getAttribute('aria-label');").await;
        assert_eq!(label, "Add a node to workers (desired 3 to 4)");
        browser.key("\u{E007}").await;
        let question = browser.accept_dialog().await;
        assert!(question.starts_with("Add a node to workers?"), "{question}");
        browser
            .wait(
                SETTLE,
                "document.querySelector('.card[data-node=\"workers-3\"][data-stage=\"Dormant\"][data-ready=\"true\"]') !== null \
                 && document.querySelector('#groups li[data-group=\"workers\"] .count').textContent === '4/4'",
                DUMP,
            )
            .await;

        // Seven windows of the page share one stream (a browser keeps 6
        // connections per host: with a stream each, the 7th would never
        // load): the 7th shows the fleet, fed by the same worker.
        let feed = "return [__dash.feed.mode, __dash.feed.worker, __dash.feed.workerStreams];";
        let first = browser.js(feed).await;
        assert_eq!(first[0], "shared", "{first}");
        let home = browser.windows().await[0].clone();
        for _ in 1..7 {
            browser.open_window(&url).await;
        }
        browser
            .wait(
                PAGE,
                "document.querySelector('#groups li[data-group=\"workers\"] .count').textContent === '4/4' \
                 && document.querySelectorAll('.card[data-ready=\"true\"]').length === 4",
                DUMP,
            )
            .await;
        let seventh = browser.js(feed).await;
        assert_eq!(seventh, first, "the 7th page is fed by the same one stream");
        let handles = browser.windows().await;
        assert_eq!(handles.len(), 7);
        for handle in handles.iter().filter(|h| **h != home) {
            browser.switch_to(handle).await;
            browser.close_window().await;
        }
        browser.switch_to(&home).await;

        // Remove workers-2 by keyboard: its button, Enter, the question
        // answered; the card goes Destroyed and the counter shows 3 of 4.
        browser.js("document.activeElement && document.activeElement.blur(); return null;").await;
        browser
            .tab_to("el.classList.contains('remove') && el.closest('.card').dataset.node === 'workers-2'", 80)
            .await;
        let label = browser.js("return document.activeElement.getAttribute('aria-label');").await;
        assert_eq!(label, "Remove workers-2: destroy its lease, not replaced");
        browser.key("\u{E007}").await;
        let question = browser.accept_dialog().await;
        assert!(question.starts_with("Remove workers-2?"), "{question}");
        browser
            .wait(
                SETTLE,
                "document.querySelector('.card[data-node=\"workers-2\"]').dataset.stage === 'Destroyed' \
                 && document.querySelector('#groups li[data-group=\"workers\"] .count').textContent === '3/4'",
                DUMP,
            )
            .await;
        assert_eq!(
            browser.js("return document.querySelectorAll('.card[data-ready=\"true\"]').length;").await,
            3
        );

        // Stop the run from the page, by keyboard: the open stream turns
        // every card Destroyed.
        browser.js("document.activeElement && document.activeElement.blur(); return null;").await;
        browser.tab_to("el.id === 'stop'", 40).await;
        browser.key("\u{E007}").await;
        let question = browser.accept_dialog().await;
        assert!(question.starts_with("Stop the run?"), "{question}");
        browser
            .wait(
                EXIT,
                "document.querySelectorAll('.card[data-stage=\"Destroyed\"]').length === 4 \
                 && document.querySelector('#groups li .count').textContent === '0/4'",
                DUMP,
            )
            .await;
        let counts = browser.js("return __dash.counts;").await;
        assert!(counts["node"].as_u64().unwrap() >= 3, "node events reached the page: {counts}");
        browser.quit().await;
    });
    assert_eq!(up.wait_exit(EXIT), 0, "{}", up.seen.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}
