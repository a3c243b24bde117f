//! The model's cost figures, at chosen times.

use super::*;

const HOUR: u64 = 3_600_000;

fn priced(id: &str, lease: Option<&str>, usd_per_hour: f64) -> Card {
    let mut card = blank(id, "gpus", Some(ProviderKind::Vastai));
    card.lease = lease.map(str::to_owned);
    card.usd_per_hour = Some(usd_per_hour);
    card
}

fn cards(cards: Vec<Card>) -> Reading {
    Reading {
        cards: Some(cards),
        ..Reading::default()
    }
}

#[test]
fn the_cost_accrues_per_lease_while_it_stands_and_stays_after_it_ends() {
    let mut model = Model::new(false);
    model.apply_at(cards(vec![priced("gpus-0", None, 2.0)]), 0);
    assert_eq!(model.usd_accrued(HOUR), 0.0);
    // A $2/h lease from t = 0 and a $1/h one from t = 1 h.
    model.apply_at(cards(vec![priced("gpus-0", Some("vastai:1"), 2.0)]), 0);
    model.apply_at(
        cards(vec![
            priced("gpus-0", Some("vastai:1"), 2.0),
            priced("gpus-1", Some("vastai:2"), 1.0),
        ]),
        HOUR,
    );
    assert!((model.usd_accrued(HOUR) - 2.0).abs() < 1e-9);
    // gpus-0's lease ends at 2 h; it is replaced by a $3/h one.
    model.apply_at(
        cards(vec![
            priced("gpus-0", None, 2.0),
            priced("gpus-1", Some("vastai:2"), 1.0),
        ]),
        2 * HOUR,
    );
    model.apply_at(
        cards(vec![
            priced("gpus-0", Some("vastai:3"), 3.0),
            priced("gpus-1", Some("vastai:2"), 1.0),
        ]),
        2 * HOUR,
    );
    // At 3 h: 4 (ended) + 2 (gpus-1, 2 h) + 3 (gpus-0's new lease, 1 h).
    let at = 3 * HOUR;
    assert!(
        (model.usd_accrued(at) - 9.0).abs() < 1e-9,
        "{}",
        model.usd_accrued(at)
    );
    assert_eq!(model.snapshot_at(at)["usd_accrued"], 9.0);
    // A free provider's lease costs nothing, however long it stands.
    let mut free = Model::new(false);
    free.apply_at(cards(vec![priced("w-0", Some("local:0"), 0.0)]), 0);
    assert_eq!(free.usd_accrued(10 * HOUR), 0.0);
}
