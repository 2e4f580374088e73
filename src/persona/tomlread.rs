//! Reads a TOML document (Codex agents, docs §2.5; Gemini CLI commands, §3.6) into its top-level
//! entries, each with the line it is on, and converts TOML values to JSON for `extra`.
//!
//! The `toml` crate does the parsing; this module only keeps the key order and the lines that
//! diagnostics need.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value as Json;

/// One top-level key of a document.
#[derive(Debug)]
pub(super) struct Entry {
    /// The key as written.
    pub(super) key: String,
    /// 1-based line of the key.
    pub(super) line: u32,
    /// Its value.
    pub(super) value: toml::Value,
}

/// A document's top-level entries in file order, deserialised with the span of each key.
struct Entries(Vec<(toml::Spanned<String>, toml::Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Top;
        impl<'de> Visitor<'de> for Top {
            type Value = Entries;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a TOML document")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    out.push(entry);
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(Top)
    }
}

/// 1-based line of a byte offset in `text`.
fn line_at(text: &str, offset: usize) -> u32 {
    let end = offset.min(text.len());
    let n = text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count();
    u32::try_from(n + 1).unwrap_or(u32::MAX)
}

/// The top-level entries of the TOML document `text`, or `None` after a `toml_syntax` error
/// diagnostic for `path` (the one way a TOML persona or command file reports a syntax error).
pub(super) fn entries_or_report(
    text: &str,
    path: &str,
    diags: &mut Vec<super::Diagnostic>,
) -> Option<Vec<Entry>> {
    match entries(text) {
        Ok(e) => Some(e),
        Err((line, why)) => {
            diags.push(super::Diagnostic {
                path: path.to_owned(),
                line,
                severity: super::Severity::Error,
                code: "toml_syntax",
                message: format!("not a valid TOML document: {why}"),
            });
            None
        }
    }
}

/// Parses `text` (a leading BOM is ignored). On a syntax error returns the line it is on (when
/// the parser knows it) and the parser's message on one line.
pub(super) fn entries(text: &str) -> Result<Vec<Entry>, (Option<u32>, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match toml::from_str::<Entries>(text) {
        Ok(Entries(list)) => Ok(list
            .into_iter()
            .map(|(k, value)| Entry {
                line: line_at(text, k.span().start),
                key: k.into_inner(),
                value,
            })
            .collect()),
        Err(e) => {
            let message = e
                .message()
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join("; ");
            Err((e.span().map(|s| line_at(text, s.start)), message))
        }
    }
}

/// A TOML value as JSON. Datetimes become their RFC 3339 text; non-finite floats become strings
/// (JSON has no NaN).
pub(super) fn to_json(v: toml::Value) -> Json {
    match v {
        toml::Value::String(s) => Json::String(s),
        toml::Value::Integer(i) => Json::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f)
            .map(Json::Number)
            .unwrap_or_else(|| Json::String(f.to_string())),
        toml::Value::Boolean(b) => Json::Bool(b),
        toml::Value::Datetime(d) => Json::String(d.to_string()),
        toml::Value::Array(items) => Json::Array(items.into_iter().map(to_json).collect()),
        toml::Value::Table(t) => {
            Json::Object(t.into_iter().map(|(k, v)| (k, to_json(v))).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_in_order_with_lines() {
        let e = entries("\u{feff}# c\nb = 1\n\na = \"x\"\n[t]\nk = 2\n").unwrap();
        let got: Vec<_> = e.iter().map(|e| (e.key.as_str(), e.line)).collect();
        assert_eq!(got, [("b", 2), ("a", 4), ("t", 5)]);
        assert_eq!(
            to_json(e.into_iter().nth(2).unwrap().value),
            serde_json::json!({"k": 2})
        );
    }

    #[test]
    fn syntax_errors_name_their_line() {
        let (line, msg) = entries("a = 1\nb = \"unterminated\nc = 2\n").unwrap_err();
        assert_eq!(line, Some(2), "{msg}");
        assert!(!msg.contains('\n'));
        let (line, _) = entries("a = 1\na = 2\n").unwrap_err();
        assert_eq!(line, Some(2));
    }

    #[test]
    fn values_become_json() {
        let e =
            entries("d = 1979-05-27T07:32:00Z\nf = nan\nl = [1, \"two\", true, 1.5]\n").unwrap();
        let v: Vec<_> = e.into_iter().map(|e| to_json(e.value)).collect();
        assert_eq!(v[0], "1979-05-27T07:32:00Z");
        assert_eq!(v[1], "NaN");
        assert_eq!(v[2], serde_json::json!([1, "two", true, 1.5]));
    }
}
