//! Search and list filters as Vast.ai takes them (§A.3, §A.6): a JSON object
//! of `field: {op: value}`, the operators `eq, neq, gt, gte, lt, lte, in,
//! notin`, and `order` as a list of `[field, direction]` pairs.
//!
//! The real API reads values leniently, and so does the fake: a number may be
//! a JSON number or a numeric string (the official CLI sends `{"gte": "1"}`),
//! a boolean `true`/`false`, `"true"`/`"false"` or `1`/`0`. What it cannot
//! read (an unknown field or operator, `"abc"` for a number) is an `Err`
//! naming the field and the value, which the handlers answer with a 400:
//! a filter the fake does not understand must never read as "no capacity".

use serde_json::{Map, Value};
use std::cmp::Ordering;

/// What a field holds, as far as a filter is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Number,
    Bool,
    Text,
    /// A field whose sample is `null` (`cpu_cores` may be): read the value
    /// by its own form.
    Any,
}

impl Kind {
    /// The kind of a sample value.
    pub fn of(sample: &Value) -> Kind {
        match sample {
            Value::Number(_) => Kind::Number,
            Value::Bool(_) => Kind::Bool,
            Value::String(_) => Kind::Text,
            _ => Kind::Any,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Neq,
    Gt,
    Gte,
    Lt,
    Lte,
    In,
    NotIn,
}

impl Op {
    fn parse(name: &str) -> Option<Op> {
        Some(match name {
            "eq" => Op::Eq,
            "neq" => Op::Neq,
            "gt" => Op::Gt,
            "gte" => Op::Gte,
            "lt" => Op::Lt,
            "lte" => Op::Lte,
            "in" => Op::In,
            "notin" => Op::NotIn,
            _ => return None,
        })
    }
}

/// A value a filter compares with, read for its field's kind.
#[derive(Clone, Debug, PartialEq)]
enum Scalar {
    Null,
    Bool(bool),
    Number(f64),
    Text(String),
}

impl Scalar {
    fn compare(&self, other: &Scalar) -> Option<Ordering> {
        match (self, other) {
            (Scalar::Number(a), Scalar::Number(b)) => a.partial_cmp(b),
            (Scalar::Bool(a), Scalar::Bool(b)) => Some(a.cmp(b)),
            (Scalar::Text(a), Scalar::Text(b)) => Some(a.cmp(b)),
            (Scalar::Null, Scalar::Null) => Some(Ordering::Equal),
            _ => None,
        }
    }

    fn equals(&self, other: &Scalar) -> bool {
        self.compare(other) == Some(Ordering::Equal)
    }
}

/// One filter, read and checked.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Filter {
    field: String,
    op: Op,
    /// One value, or the list of `in`/`notin`.
    wants: Vec<Scalar>,
}

/// `535.86.05` as the CLI sends it: 535086005.
fn driver_number(text: &str) -> Option<f64> {
    let parts: Vec<&str> = text.trim().split('.').collect();
    if parts.len() != 3 {
        return None;
    }
    let mut number = 0.0;
    for part in parts {
        let part: u32 = part.parse().ok()?;
        number = number * 1000.0 + f64::from(part);
    }
    Some(number)
}

/// A finite number written as text (`" 1 "`, `"0.99"`, `"1e3"`).
pub(crate) fn number_of(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|n| n.is_finite())
}

/// A boolean written as text: `true`/`false` in any case, or `1`/`0`.
pub(crate) fn bool_of(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" => Some(true),
        "false" | "0" => Some(false),
        _ => None,
    }
}

/// Reads `value` as a `kind` value of `field`; `Err` says why not.
fn read(field: &str, kind: Kind, value: &Value) -> Result<Scalar, String> {
    let shown = value.to_string();
    let scalar = match (kind, value) {
        (_, Value::Null) => Some(Scalar::Null),
        (_, Value::Array(_) | Value::Object(_)) => None,
        (Kind::Text, _) if field == "driver_version" => match value {
            Value::Number(n) => n.as_f64().map(Scalar::Number),
            Value::String(s) => driver_number(s)
                .or_else(|| number_of(s))
                .map(Scalar::Number),
            _ => None,
        },
        (Kind::Number, Value::Number(n)) => n.as_f64().map(Scalar::Number),
        (Kind::Number, Value::String(s)) => number_of(s).map(Scalar::Number),
        (Kind::Bool, Value::Bool(b)) => Some(Scalar::Bool(*b)),
        (Kind::Bool, Value::String(s)) => bool_of(s).map(Scalar::Bool),
        (Kind::Bool, Value::Number(n)) => match n.as_f64() {
            Some(1.0) => Some(Scalar::Bool(true)),
            Some(0.0) => Some(Scalar::Bool(false)),
            _ => None,
        },
        (Kind::Text, Value::String(s)) => Some(Scalar::Text(s.clone())),
        (Kind::Text, Value::Number(n)) => Some(Scalar::Text(n.to_string())),
        (Kind::Text | Kind::Any, Value::Bool(b)) => Some(Scalar::Bool(*b)),
        (Kind::Any, Value::Number(n)) => n.as_f64().map(Scalar::Number),
        (Kind::Any, Value::String(s)) => Some(match (number_of(s), s.trim()) {
            (Some(n), _) => Scalar::Number(n),
            (None, word) if word.eq_ignore_ascii_case("true") => Scalar::Bool(true),
            (None, word) if word.eq_ignore_ascii_case("false") => Scalar::Bool(false),
            (None, _) => Scalar::Text(s.clone()),
        }),
        // `has_avx` is stored as 1/0 and documented as a bool.
        (Kind::Number, Value::Bool(b)) => Some(Scalar::Number(f64::from(u8::from(*b)))),
    };
    let expected = match kind {
        Kind::Number => "a number",
        Kind::Bool => "true or false",
        Kind::Text if field == "driver_version" => "a version like 535.86.05",
        Kind::Text | Kind::Any => "a single value",
    };
    scalar.ok_or_else(|| format!("{field}: cannot read {shown} as {expected}"))
}

/// Reads every `field: {op: value}` filter of `query` but the `skip`ped
/// control keys, each field typed by `kind_of` (`None`: a field the server
/// does not know). A bare value means `eq`, a bare `in` value a list of one.
pub(crate) fn parse_filters(
    query: &Map<String, Value>,
    skip: &[&str],
    kind_of: impl Fn(&str) -> Option<Kind>,
) -> Result<Vec<Filter>, String> {
    let mut filters = Vec::new();
    for (field, ops) in query.iter().filter(|(k, _)| !skip.contains(&k.as_str())) {
        let kind = kind_of(field).ok_or_else(|| format!("unknown field {field}"))?;
        let ops: Vec<(&str, &Value)> = match ops {
            Value::Object(ops) => ops.iter().map(|(op, v)| (op.as_str(), v)).collect(),
            Value::Array(_) => return Err(format!("{field}: expected {{op: value}}, got {ops}")),
            bare => vec![("eq", bare)],
        };
        for (name, want) in ops {
            let op = Op::parse(name).ok_or_else(|| {
                format!("{field}: unknown operator {name:?} (eq, neq, gt, gte, lt, lte, in, notin)")
            })?;
            let wants = match (op, want) {
                (Op::In | Op::NotIn, Value::Array(list)) => list
                    .iter()
                    .map(|w| read(field, kind, w))
                    .collect::<Result<_, _>>()?,
                (_, want) => vec![read(field, kind, want)?],
            };
            filters.push(Filter {
                field: field.clone(),
                op,
                wants,
            });
        }
    }
    Ok(filters)
}

/// What `item` holds for `filter`: its field, and for `geolocation` also
/// the country code the real API matches (`"Washington, US"` is `"US"`).
fn haves(item: &Value, filter: &Filter) -> Vec<Scalar> {
    let value = item.get(&filter.field).unwrap_or(&Value::Null);
    let wants_number = matches!(filter.wants.first(), Some(Scalar::Number(_)));
    let first = match value {
        Value::Null => Scalar::Null,
        Value::Bool(b) => Scalar::Bool(*b),
        Value::Number(n) => n.as_f64().map_or(Scalar::Null, Scalar::Number),
        Value::String(s) if filter.field == "driver_version" && wants_number => {
            driver_number(s).map_or(Scalar::Null, Scalar::Number)
        }
        Value::String(s) => Scalar::Text(s.clone()),
        _ => Scalar::Null,
    };
    let mut haves = vec![first];
    if filter.field == "geolocation"
        && let Some(code) = value.as_str().and_then(|g| g.rsplit(", ").next())
    {
        haves.push(Scalar::Text(code.to_owned()));
    }
    haves
}

impl Filter {
    fn holds(&self, item: &Value) -> bool {
        let haves = haves(item, self);
        let any_equal = || haves.iter().any(|h| self.wants.iter().any(|w| h.equals(w)));
        let order = || haves[0].compare(&self.wants[0]);
        match self.op {
            Op::Eq | Op::In => any_equal(),
            Op::Neq | Op::NotIn => !any_equal(),
            Op::Gt => order() == Some(Ordering::Greater),
            Op::Gte => matches!(order(), Some(Ordering::Greater | Ordering::Equal)),
            Op::Lt => order() == Some(Ordering::Less),
            Op::Lte => matches!(order(), Some(Ordering::Less | Ordering::Equal)),
        }
    }
}

/// Whether `item` passes every filter.
pub(crate) fn matches(item: &Value, filters: &[Filter]) -> bool {
    filters.iter().all(|f| f.holds(item))
}

/// A sort key: a field and whether it sorts descending.
pub(crate) type OrderKey = (String, bool);

/// Reads `order`: a list of `[field, "asc"|"desc"]` pairs (a bare field
/// name sorts ascending); every field must be known.
pub(crate) fn parse_order(
    order: Option<&Value>,
    known: impl Fn(&str) -> bool,
) -> Result<Vec<OrderKey>, String> {
    let entries = match order {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(entries)) => entries,
        Some(other) => {
            return Err(format!(
                "order: expected a list of [field, direction] pairs, got {other}"
            ));
        }
    };
    let mut keys = Vec::new();
    for entry in entries {
        let (field, direction) = match entry {
            Value::String(field) => (Some(field.as_str()), Some("asc")),
            Value::Array(pair) if (1..=2).contains(&pair.len()) => (
                pair[0].as_str(),
                pair.get(1).map_or(Some("asc"), Value::as_str),
            ),
            _ => (None, None),
        };
        let descending = match (field, direction.map(str::to_ascii_lowercase).as_deref()) {
            (Some(_), Some("asc")) => false,
            (Some(_), Some("desc")) => true,
            _ => {
                return Err(format!(
                    "order: cannot read {entry} as [field, \"asc\" or \"desc\"]"
                ));
            }
        };
        let field = field.unwrap_or_default();
        if !known(field) {
            return Err(format!("order: unknown field {field}"));
        }
        keys.push((field.to_owned(), descending));
    }
    Ok(keys)
}

/// Compares two items by `keys`, then by id.
pub(crate) fn compare_by(a: &Value, b: &Value, keys: &[OrderKey]) -> Ordering {
    for (field, descending) in keys {
        let read = |v: &Value| match v.get(field) {
            Some(Value::Number(n)) => n.as_f64().map_or(Scalar::Null, Scalar::Number),
            Some(Value::String(s)) => Scalar::Text(s.clone()),
            Some(Value::Bool(b)) => Scalar::Bool(*b),
            _ => Scalar::Null,
        };
        let ord = read(a).compare(&read(b)).unwrap_or(Ordering::Equal);
        let ord = if *descending { ord.reverse() } else { ord };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    let id = |v: &Value| v.get("id").and_then(Value::as_u64).unwrap_or(0);
    id(a).cmp(&id(b))
}

/// A count or size sent as a number or a numeric string (`limit`,
/// `allocated_storage`); `Err` names the key and the value.
pub(crate) fn number_param(query: &Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
    match query.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(Value::String(s)) if number_of(s).is_some() => Ok(number_of(s)),
        Some(other) => Err(format!("{key}: cannot read {other} as a number")),
    }
}

#[cfg(test)]
#[path = "query_tests.rs"]
mod tests;
