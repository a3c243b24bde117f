//! Each value form and operator of an offer search, and the 400 message for
//! what cannot be read. Catalog (default): seven verified offers and one
//! unverified (18422313); prices 0.32, 0.30, 0.28, 0.35 (RTX 4090), 0.18
//! (A5000), 1.10 (A100), 2.20 (H100), 0.12 (V100).

use crate::fake::catalog::{default_catalog, search};
use serde_json::{Value, json};

const ALL: [u64; 8] = [
    18_422_311, 18_422_312, 18_422_313, 18_422_314, 18_422_320, 18_422_330, 18_422_340, 18_422_350,
];

/// The ids a search returns, in its order.
fn ids(body: Value) -> Vec<u64> {
    search(&default_catalog(), &body)
        .unwrap_or_else(|e| panic!("{body} refused: {e}"))
        .iter()
        .map(|o| o["id"].as_u64().unwrap())
        .collect()
}

/// The ids a search returns, sorted (for filters, where order is not the point).
fn set(filters: Value) -> Vec<u64> {
    let mut ids = ids(filters);
    ids.sort_unstable();
    ids
}

fn refused(body: Value) -> String {
    match search(&default_catalog(), &body) {
        Err(msg) => msg,
        Ok(offers) => panic!("{body} accepted, {} offers", offers.len()),
    }
}

#[test]
fn numbers_are_json_numbers_or_numeric_strings() {
    assert_eq!(set(json!({"num_gpus": {"gte": 1}})), ALL);
    assert_eq!(set(json!({"num_gpus": {"gte": "1"}})), ALL);
    assert_eq!(set(json!({"num_gpus": {"gte": " 1 "}})), ALL);
    assert_eq!(set(json!({"num_gpus": {"gte": "2"}})), Vec::<u64>::new());
    let fast = vec![18_422_314, 18_422_330, 18_422_340];
    assert_eq!(set(json!({"inet_down": {"gt": 1000}})), fast);
    assert_eq!(set(json!({"inet_down": {"gt": "1000"}})), fast);
    assert_eq!(set(json!({"inet_down": {"gt": "1e3"}})), fast);
    assert_eq!(set(json!({"gpu_ram": {"gte": 24000.0}})).len(), 7);
    assert_eq!(
        set(json!({"reliability": {"gt": "0.998"}})),
        vec![18_422_311, 18_422_314, 18_422_340]
    );
}

#[test]
fn booleans_are_booleans_strings_or_bits() {
    let verified: Vec<u64> = ALL.into_iter().filter(|id| *id != 18_422_313).collect();
    for yes in [
        json!(true),
        json!("true"),
        json!("True"),
        json!(1),
        json!("1"),
    ] {
        assert_eq!(set(json!({"verified": {"eq": yes}})), verified, "{yes}");
    }
    for no in [json!(false), json!("false"), json!("FALSE"), json!(0)] {
        assert_eq!(
            set(json!({"verified": {"eq": no}})),
            vec![18_422_313],
            "{no}"
        );
    }
    // A bare value means eq; a field stored as 1/0 takes a boolean.
    assert_eq!(set(json!({"verified": "false"})), vec![18_422_313]);
    assert_eq!(set(json!({"has_avx": {"eq": true}})), ALL);
}

#[test]
fn every_operator() {
    let price = |op: &str, value: Value| set(json!({"dph_base": {op: value}}));
    assert_eq!(price("eq", json!("0.18")), vec![18_422_320]);
    assert_eq!(price("neq", json!(0.18)).len(), 7);
    assert_eq!(price("gt", json!(1.10)), vec![18_422_340]);
    assert_eq!(price("gte", json!("1.1")), vec![18_422_330, 18_422_340]);
    assert_eq!(price("lt", json!(0.18)), vec![18_422_350]);
    assert_eq!(price("lte", json!(0.18)), vec![18_422_320, 18_422_350]);
    assert_eq!(
        price("in", json!([0.12, "2.2"])),
        vec![18_422_340, 18_422_350]
    );
    assert_eq!(price("notin", json!(["0.12", 2.2])).len(), 6);
    // `in` with one bare value is a list of one.
    assert_eq!(price("in", json!(0.12)), vec![18_422_350]);
    let gpu = |op: &str, value: Value| set(json!({"gpu_name": {op: value}}));
    assert_eq!(
        gpu("in", json!(["H100 SXM", "Tesla V100"])),
        vec![18_422_340, 18_422_350]
    );
    assert_eq!(gpu("notin", json!(["RTX 4090"])).len(), 4);
    assert_eq!(gpu("eq", json!("RTX A5000")), vec![18_422_320]);
    // Several operators on one field all hold.
    assert_eq!(
        set(json!({"dph_base": {"gt": "0.2", "lt": "0.31"}})),
        vec![18_422_312, 18_422_313]
    );
}

#[test]
fn country_codes_versions_and_nulls() {
    assert_eq!(set(json!({"geolocation": {"eq": "US"}})), ALL);
    assert_eq!(set(json!({"geolocation": {"eq": "Washington, US"}})), ALL);
    assert_eq!(set(json!({"geolocation": {"in": ["US", "CA"]}})), ALL);
    assert!(set(json!({"geolocation": {"notin": ["US"]}})).is_empty());
    assert!(set(json!({"geolocation": {"in": ["SE", "TW"]}})).is_empty());
    // The CLI sends `driver_version >= 535.86.05` as 535086005.
    assert_eq!(set(json!({"driver_version": {"gte": 535_086_005}})), ALL);
    assert_eq!(set(json!({"driver_version": {"gte": "535.86.05"}})), ALL);
    assert!(set(json!({"driver_version": {"gt": "600.0.0"}})).is_empty());
    assert_eq!(set(json!({"driver_version": {"eq": "570.124.04"}})), ALL);
    // `cpu_cores` is null on every offer; `eq null` finds them.
    assert_eq!(set(json!({"cpu_cores": {"eq": null}})), ALL);
    assert!(set(json!({"cpu_cores": {"gte": "4"}})).is_empty());
}

#[test]
fn order_is_a_list_of_pairs_and_limit_storage_may_be_strings() {
    assert_eq!(
        ids(json!({"order": [["dph_base", "asc"]], "limit": "3"})),
        vec![18_422_350, 18_422_320, 18_422_313]
    );
    assert_eq!(
        ids(json!({"order": [["gpu_ram", "desc"], ["dph_base", "DESC"]], "limit": 2})),
        vec![18_422_330, 18_422_340]
    );
    assert_eq!(
        ids(json!({"order": ["dph_base"], "limit": 1})),
        vec![18_422_350]
    );
    assert_eq!(
        ids(json!({"order": [["dph_base"]], "limit": 1})),
        vec![18_422_350]
    );
    assert_eq!(ids(json!({"order": []})), ALL, "no order: by id");
    let offers = search(
        &default_catalog(),
        &json!({"allocated_storage": "720", "limit": 1}),
    )
    .unwrap();
    // 720 GB at 0.15 $/GB/month is 0.15 $/h on top of 0.32.
    let total = offers[0]["dph_total"].as_f64().unwrap();
    assert!((total - 0.47).abs() < 1e-9, "{total}");
}

#[test]
fn the_official_cli_body_finds_offers() {
    // `vastai search offers 'num_gpus>=1 reliability>0.99 gpu_ram>=24
    // geolocation in [US,CA]'`, as vastai 1.9.1 sends it.
    let body = json!({"verified": {"eq": true}, "external": {"eq": false}, "rentable": {"eq": true},
        "num_gpus": {"gte": "1"}, "reliability": {"gt": "0.99"}, "gpu_ram": {"gte": 24000.0},
        "geolocation": {"in": ["US", "CA"]}, "order": [["score", "desc"]], "type": "on-demand",
        "allocated_storage": 5.0});
    let found = set(body);
    assert_eq!(
        found,
        vec![18_422_311, 18_422_314, 18_422_320, 18_422_330, 18_422_340]
    );
}

#[test]
fn what_cannot_be_read_is_refused_naming_field_and_value() {
    let cases = [
        (json!({"num_gpus": {"gte": "abc"}}), ["num_gpus", "\"abc\""]),
        (json!({"num_gpus": {"gte": [1]}}), ["num_gpus", "[1]"]),
        (
            json!({"verified": {"eq": "maybe"}}),
            ["verified", "\"maybe\""],
        ),
        (json!({"num_gpus": {"gtx": 1}}), ["num_gpus", "\"gtx\""]),
        (
            json!({"no_such_field": {"eq": 1}}),
            ["unknown field", "no_such_field"],
        ),
        (json!({"gpu_name": ["RTX 4090"]}), ["gpu_name", "RTX 4090"]),
        (
            json!({"gpu_name": {"in": [{"a": 1}]}}),
            ["gpu_name", "{\"a\":1}"],
        ),
        (
            json!({"driver_version": {"gte": "new"}}),
            ["driver_version", "\"new\""],
        ),
        (json!({"order": [["score", "up"]]}), ["order", "up"]),
        (
            json!({"order": [["no_such_field", "asc"]]}),
            ["order", "no_such_field"],
        ),
        (json!({"order": "score-"}), ["order", "score-"]),
        (json!({"limit": "ten"}), ["limit", "ten"]),
        (
            json!({"allocated_storage": "lots"}),
            ["allocated_storage", "lots"],
        ),
        (json!({"type": "spot"}), ["type", "spot"]),
    ];
    for (body, names) in cases {
        let msg = refused(body.clone());
        for name in names {
            assert!(msg.contains(name), "{body}: {msg:?} does not name {name}");
        }
    }
    assert!(refused(json!([1])).contains("Invalid json body"));
}
