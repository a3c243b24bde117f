//! A reader over toml's spanned document tree that records every problem
//! (type, range, unknown or missing field) with its byte span and dotted
//! path, and goes on: each getter returns a placeholder after an error so
//! the whole file is checked in one pass.

use super::Diagnostic;
use super::duration::parse_duration;
use core_fsm::time::Duration;
use std::collections::BTreeMap;
use std::ops::Range;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// One value of the document with its span.
pub(crate) type Value<'i> = Spanned<DeValue<'i>>;

/// Collects diagnostics and the span of every path read.
pub(crate) struct Doc {
    pub diagnostics: Vec<(Range<usize>, Diagnostic)>,
    /// Span of every value read, by dotted TOML path; rule errors found
    /// later are placed with it.
    pub spans: BTreeMap<String, Range<usize>>,
}

impl Doc {
    pub fn new() -> Doc {
        Doc {
            diagnostics: Vec::new(),
            spans: BTreeMap::new(),
        }
    }

    /// Records a problem at `span` for `field`.
    pub fn error(&mut self, span: Range<usize>, field: &str, reason: impl Into<String>) {
        let diagnostic = Diagnostic {
            line: 0,
            column: 0,
            field: field.to_owned(),
            reason: reason.into(),
        };
        self.diagnostics.push((span, diagnostic));
    }

    /// Opens `value` as a table whose keys must be among `known`.
    pub fn table<'a, 'i>(
        &mut self,
        path: &str,
        value: &'a Value<'i>,
        known: &'static [&'static str],
    ) -> Option<Table<'a, 'i>> {
        self.spans.insert(path.to_owned(), value.span());
        match value.get_ref() {
            DeValue::Table(table) => Some(Table::new(path, value.span(), table, known)),
            other => {
                let reason = format!("expected a table, found {}", type_name(other));
                self.error(value.span(), path, reason);
                None
            }
        }
    }
}

/// The keys of one table, taken one by one; what is left is unknown.
pub(crate) struct Table<'a, 'i> {
    path: String,
    span: Range<usize>,
    entries: BTreeMap<String, (Range<usize>, &'a Value<'i>)>,
    known: &'static [&'static str],
}

impl<'a, 'i> Table<'a, 'i> {
    /// A table at `path` spanning `span` (for the document root, 0..0).
    pub fn new(
        path: &str,
        span: Range<usize>,
        table: &'a DeTable<'i>,
        known: &'static [&'static str],
    ) -> Table<'a, 'i> {
        let entries = table
            .iter()
            .map(|(key, value)| (key.get_ref().to_string(), (key.span(), value)))
            .collect();
        Table {
            path: path.to_owned(),
            span,
            entries,
            known,
        }
    }

    /// The dotted path of `key` in this table.
    pub fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Takes `key`, recording its span; `None` when absent.
    pub fn take(&mut self, doc: &mut Doc, key: &str) -> Option<&'a Value<'i>> {
        assert!(self.known.contains(&key), "`{key}` is not declared");
        let (_, value) = self.entries.remove(key)?;
        doc.spans.insert(self.path_of(key), value.span());
        Some(value)
    }

    /// Takes a required `key`; reports it missing (at the table) if absent.
    pub fn require(&mut self, doc: &mut Doc, key: &str) -> Option<&'a Value<'i>> {
        let value = self.take(doc, key);
        if value.is_none() {
            let reason = format!("missing field `{key}`");
            doc.error(self.span.clone(), &self.path_of(key), reason);
        }
        value
    }

    /// Reports every key not taken as unknown, naming the known ones.
    pub fn finish(self, doc: &mut Doc) {
        for (key, (span, _)) in &self.entries {
            let reason = format!(
                "unknown field `{key}`, expected one of: {}",
                self.known.join(", ")
            );
            doc.error(span.clone(), &self.path_of(key), reason);
        }
    }

    /// A string field.
    pub fn string(&mut self, doc: &mut Doc, key: &str, required: bool) -> Option<String> {
        let value = self.get(doc, key, required)?;
        let path = self.path_of(key);
        as_string(doc, &path, value)
    }

    /// An unsigned integer field no larger than `max`.
    pub fn integer(&mut self, doc: &mut Doc, key: &str, required: bool, max: u64) -> Option<u64> {
        let value = self.get(doc, key, required)?;
        let path = self.path_of(key);
        let DeValue::Integer(int) = value.get_ref() else {
            let reason = format!("expected an integer, found {}", type_name(value.get_ref()));
            doc.error(value.span(), &path, reason);
            return None;
        };
        match i128::from_str_radix(int.as_str(), int.radix()) {
            Ok(n) if (0..=i128::from(max)).contains(&n) => {
                Some(u64::try_from(n).expect("in range"))
            }
            Ok(n) if n < 0 => {
                doc.error(
                    value.span(),
                    &path,
                    format!("must not be negative, got {n}"),
                );
                None
            }
            _ => {
                doc.error(value.span(), &path, format!("must be at most {max}"));
                None
            }
        }
    }

    /// A `u32` field.
    pub fn u32(&mut self, doc: &mut Doc, key: &str, required: bool) -> Option<u32> {
        let n = self.integer(doc, key, required, u64::from(u32::MAX))?;
        Some(u32::try_from(n).expect("checked against u32::MAX"))
    }

    /// A boolean field.
    pub fn boolean(&mut self, doc: &mut Doc, key: &str) -> Option<bool> {
        let value = self.get(doc, key, false)?;
        match value.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                let reason = format!("expected true or false, found {}", type_name(other));
                doc.error(value.span(), &self.path_of(key), reason);
                None
            }
        }
    }

    /// A decimal number (integer or float, at least 0 and at most `max`)
    /// times `scale`, which must come out whole: `0.98` per mille is 980,
    /// `0.9875` per mille is an error, not a silent rounding.
    pub fn scaled(
        &mut self,
        doc: &mut Doc,
        key: &str,
        scale: u32,
        max: f64,
        unit: &str,
    ) -> Option<u32> {
        let value = self.get(doc, key, false)?;
        let path = self.path_of(key);
        let number = match value.get_ref() {
            DeValue::Integer(int) => i64::from_str_radix(int.as_str(), int.radix())
                .ok()
                .map(|n| n as f64),
            DeValue::Float(float) => float.as_str().replace('_', "").parse::<f64>().ok(),
            other => {
                let reason = format!("expected a number, found {}", type_name(other));
                doc.error(value.span(), &path, reason);
                return None;
            }
        };
        let Some(number) = number.filter(|n| n.is_finite()) else {
            doc.error(value.span(), &path, "is not a finite number");
            return None;
        };
        if !(0.0..=max).contains(&number) {
            doc.error(
                value.span(),
                &path,
                format!("must be between 0 and {max}, got {number}"),
            );
            return None;
        }
        let scaled = number * f64::from(scale);
        let whole = scaled.round();
        if (scaled - whole).abs() > 1e-6 {
            let reason = format!("{number} is finer than {unit}");
            doc.error(value.span(), &path, reason);
            return None;
        }
        // `whole` is within 0..=max*scale, checked above.
        Some(whole as u32)
    }

    /// A duration field: a string of number-unit pairs (`"120s"`, `"1m30s"`,
    /// `"500ms"`, `"2h"`).
    pub fn duration(&mut self, doc: &mut Doc, key: &str, required: bool) -> Option<Duration> {
        let value = self.get(doc, key, required)?;
        let path = self.path_of(key);
        let DeValue::String(text) = value.get_ref() else {
            let reason = format!(
                "expected a duration string such as \"120s\", found {}",
                type_name(value.get_ref())
            );
            doc.error(value.span(), &path, reason);
            return None;
        };
        match parse_duration(text) {
            Ok(duration) => Some(duration),
            Err(reason) => {
                doc.error(value.span(), &path, reason);
                None
            }
        }
    }

    /// A list of strings.
    pub fn strings(&mut self, doc: &mut Doc, key: &str) -> Option<Vec<String>> {
        let value = self.get(doc, key, false)?;
        let path = self.path_of(key);
        let DeValue::Array(items) = value.get_ref() else {
            let reason = format!(
                "expected a list of strings, found {}",
                type_name(value.get_ref())
            );
            doc.error(value.span(), &path, reason);
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for (index, item) in items.iter().enumerate() {
            let item_path = format!("{path}[{index}]");
            doc.spans.insert(item_path.clone(), item.span());
            match as_string(doc, &item_path, item) {
                Some(text) => out.push(text),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// A table of string values.
    pub fn string_map(&mut self, doc: &mut Doc, key: &str) -> Option<BTreeMap<String, String>> {
        let value = self.get(doc, key, false)?;
        let path = self.path_of(key);
        let DeValue::Table(table) = value.get_ref() else {
            let reason = format!(
                "expected a table of strings, found {}",
                type_name(value.get_ref())
            );
            doc.error(value.span(), &path, reason);
            return None;
        };
        let mut out = BTreeMap::new();
        let mut ok = true;
        for (name, item) in table.iter() {
            let item_path = format!("{path}.{}", name.get_ref());
            doc.spans.insert(item_path.clone(), item.span());
            match as_string(doc, &item_path, item) {
                Some(text) => {
                    out.insert(name.get_ref().to_string(), text);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn get(&mut self, doc: &mut Doc, key: &str, required: bool) -> Option<&'a Value<'i>> {
        if required {
            self.require(doc, key)
        } else {
            self.take(doc, key)
        }
    }
}

fn as_string(doc: &mut Doc, path: &str, value: &Value<'_>) -> Option<String> {
    match value.get_ref() {
        DeValue::String(text) => Some(text.to_string()),
        other => {
            let reason = format!("expected a string, found {}", type_name(other));
            doc.error(value.span(), path, reason);
            None
        }
    }
}

/// The TOML type of a value, for messages.
pub(crate) fn type_name(value: &DeValue<'_>) -> &'static str {
    match value {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a datetime",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}
