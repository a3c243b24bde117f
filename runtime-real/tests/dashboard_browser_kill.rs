//! The kill drill from the page, in headless Chromium against a real
//! `drover up` of three local nodes with bounded replacement: Tab to a
//! card's "Kill (drill)", Enter, the question answered; its agent exits as
//! in a crash, membership calls it Dead, the card shows it failed and the
//! counter dips to 2/3; a replacement is bootstrapped and the counter is
//! back at 3/3 with a new lease. A kill without the token is refused. Every
//! wait is on the page's DOM changing (or a line, an exit), bounded.

mod dashboard_support;
mod up_support;

use dashboard_support::webdriver::Browser;
use dashboard_support::*;
use std::time::Duration;
use up_support::*;

const SETTLE: Duration = Duration::from_secs(90);
const REPAIR: Duration = Duration::from_secs(60);
const EXIT: Duration = Duration::from_secs(60);
const PAGE: Duration = Duration::from_secs(30);
const DUMP: &str = "JSON.stringify({cards: [...document.querySelectorAll('.card')].map(c => \
    c.dataset.node + ':' + c.dataset.stage + ':' + c.dataset.ready), \
    groups: document.getElementById('groups').textContent, \
    notice: document.getElementById('notice').textContent})";
const COUNT: &str =
    "document.querySelector('#groups li[data-group=\"workers\"] .count').textContent";

#[test]
fn a_node_killed_from_the_page_dies_dips_the_counter_and_is_replaced() {
    let dir = scratch("dash-kill");
    let state = dir.join("state");
    let plan = bounded(local_plan(3));
    let plan = write_plan(&dir, &plan);
    let mut up = Up::start(&state, &plan);
    let url = up.wait_line(SETTLE, |l| l["event"] == "dashboard")["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let (base, _) = split_url(&url);
    up.wait_line(SETTLE, |l| l["event"] == "settled");
    let old_lease = node(&status(&state), "workers-1")["lease"]
        .as_str()
        .unwrap()
        .to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Without the token: refused, nothing killed.
        let bare = http()
            .post(format!("{base}/api/nodes/workers-1/kill"))
            .send()
            .await
            .unwrap();
        assert_eq!(bare.status(), 401);
        let browser = Browser::start(PAGE).await;
        browser.goto(&url).await;
        browser
            .wait(SETTLE, &format!("{COUNT} === '3/3'"), DUMP)
            .await;
        browser.js("document.activeElement && document.activeElement.blur(); return null;").await;
        browser
            .tab_to("el.classList.contains('kill') && el.closest('.card').dataset.node === 'workers-1'", 80)
            .await;
        browser.key("\u{E007}").await;
        let question = browser.accept_dialog().await;
        assert!(question.starts_with("Kill workers-1's agent (a drill)?"), "{question}");
        // The counter dips: workers-1 is no longer ready (Dead, Failed,
        // then its replacement bootstrapping).
        browser
            .wait(REPAIR, &format!("{COUNT} === '2/3'"), DUMP)
            .await;
        // And recovers: a new lease, ready again.
        browser
            .wait(
                REPAIR,
                &format!("{COUNT} === '3/3' && document.querySelector('.card[data-node=\"workers-1\"] [data-f=\"lease\"]').textContent !== '{old_lease}'"),
                DUMP,
            )
            .await;
        browser.quit().await;
    });
    // The story in up's lines, in order: Dead, Failed, then Dormant on a
    // new lease.
    up.wait_line(REPAIR, |v| {
        v["event"] == "liveness" && v["id"] == "workers-1" && v["liveness"] == "Dead"
    });
    up.wait_line(REPAIR, |v| v["id"] == "workers-1" && v["stage"] == "Failed");
    up.wait_line(REPAIR, |v| {
        v["id"] == "workers-1" && v["stage"] == "Dormant" && v["lease"] != old_lease.as_str()
    });
    // The drill is in the datastream, on the membership channel.
    let run = logs_json(&state, &["--run", "--channel", "membership"]);
    assert!(
        run.iter()
            .any(|l| l["line"] == "workers-1: its agent is killed by the operator (a drill)"),
        "{run:#?}"
    );
    up.type_stop();
    // A node failed during the run: exit 1, as for any node failure.
    assert_eq!(up.wait_exit(EXIT), 1, "{}", up.seen.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}
