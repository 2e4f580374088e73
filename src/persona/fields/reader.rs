//! Typed access to entries ([`Reader`]): strings, lists (CSV or YAML), numbers and the rest,
//! each bad value reported through the diagnostic sink; YAML → JSON for `extra`; and the rule
//! for a usable name. Shared by personas and workflow commands.

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

use crate::persona::{MAX_NAME_BYTES, Severity, Spawns, ThinkingLevel, split::Block, split_csv};

use super::{DiagFn, entries::Entry};

/// Why a name is unusable, if it is. A name is a name, never a path: paths are built from it
/// (an agent's memory directory), so `.` and `..` are refused with the separators.
pub(in crate::persona) fn invalid_name(n: &str) -> Option<String> {
    if n == "." || n == ".." {
        return Some("is a relative path, not a name".to_owned());
    }
    if n.len() > MAX_NAME_BYTES {
        return Some(format!(
            "is {} bytes long; the limit is {MAX_NAME_BYTES}",
            n.len()
        ));
    }
    if let Some(c) = n
        .chars()
        .find(|c| *c == '/' || *c == '\\' || c.is_control())
    {
        return Some(format!("contains the forbidden character {c:?}"));
    }
    None
}

/// Typed access to entries, reporting bad values through the diagnostic sink.
pub(in crate::persona) struct Reader<'a, 'd> {
    pub(super) block: &'a Block<'a>,
    pub(super) diag: &'a mut DiagFn<'d>,
    pub(super) failed: bool,
}

impl<'a, 'd> Reader<'a, 'd> {
    /// A reader over `block`'s entries.
    pub(in crate::persona) fn new(block: &'a Block<'a>, diag: &'a mut DiagFn<'d>) -> Self {
        Self {
            block,
            diag,
            failed: false,
        }
    }

    /// Whether an error was reported (the file is then skipped).
    pub(in crate::persona) fn failed(&self) -> bool {
        self.failed
    }

    pub(in crate::persona) fn line(&self, e: &Entry) -> Option<u32> {
        Some(
            e.line
                .map(|i| self.block.orig_line(i))
                .unwrap_or(self.block.open_line),
        )
    }

    pub(in crate::persona) fn warn(&mut self, e: &Entry, code: &'static str, msg: String) {
        let line = self.line(e);
        (self.diag)(line, Severity::Warning, code, msg);
    }

    pub(in crate::persona) fn error(&mut self, e: &Entry, code: &'static str, msg: String) {
        let line = self.line(e);
        (self.diag)(line, Severity::Error, code, msg);
        self.failed = true;
    }

    /// A string field; numbers and booleans are taken as their text, null as absent.
    /// The warning for a field that only describes and has an unusable type (a mapping).
    pub(in crate::persona) fn warn_describing(&mut self, e: &Entry) {
        self.warn(
            e,
            "invalid_field",
            format!(
                "`{}` should be text; ignored, the file still loads",
                e.raw_key
            ),
        );
    }

    pub(in crate::persona) fn string(&mut self, e: &Entry) -> Option<String> {
        match &e.value {
            Yaml::String(s) => Some(s.clone()),
            Yaml::Number(n) => Some(n.to_string()),
            Yaml::Bool(b) => Some(b.to_string()),
            Yaml::Null => None,
            _ => {
                self.error(
                    e,
                    "invalid_field",
                    format!("`{}` must be a string", e.raw_key),
                );
                None
            }
        }
    }

    /// [`Reader::string`], moving a string value out of the entry instead of copying it.
    pub(in crate::persona) fn take_string(&mut self, e: &mut Entry) -> Option<String> {
        match &mut e.value {
            Yaml::String(s) => Some(std::mem::take(s)),
            _ => self.string(e),
        }
    }

    /// [`Reader::list`], moving the items of a list of strings out of the entry when they need
    /// no trimming.
    pub(in crate::persona) fn take_list(&mut self, e: &mut Entry) -> Option<Vec<String>> {
        match &mut e.value {
            Yaml::Sequence(items) if items.iter().all(|it| matches!(it, Yaml::String(_))) => {
                let mut out = Vec::with_capacity(items.len());
                for it in items {
                    let Yaml::String(s) = it else { continue };
                    let trimmed = s.trim();
                    if trimmed.is_empty() {
                        continue;
                    }
                    if trimmed.len() == s.len() {
                        out.push(std::mem::take(s));
                    } else {
                        out.push(trimmed.to_owned());
                    }
                }
                Some(out)
            }
            _ => self.list(e),
        }
    }

    /// A CSV string or a list of strings.
    pub(in crate::persona) fn list(&mut self, e: &Entry) -> Option<Vec<String>> {
        match &e.value {
            Yaml::String(s) => Some(split_csv(s)),
            Yaml::Null => None,
            Yaml::Sequence(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, it) in items.iter().enumerate() {
                    match it {
                        Yaml::String(s) => {
                            let s = s.trim();
                            if !s.is_empty() {
                                out.push(s.to_owned());
                            }
                        }
                        _ => {
                            self.error(
                                e,
                                "invalid_field",
                                format!("`{}` item {i} must be a string", e.raw_key),
                            );
                            return None;
                        }
                    }
                }
                Some(out)
            }
            _ => {
                self.error(
                    e,
                    "invalid_field",
                    format!(
                        "`{}` must be a comma-separated string or a list of strings",
                        e.raw_key
                    ),
                );
                None
            }
        }
    }

    pub(in crate::persona) fn spawns(&mut self, e: &Entry) -> Option<Spawns> {
        if let Yaml::String(s) = &e.value {
            if s.trim() == "*" {
                return Some(Spawns::Any);
            }
            if s.trim().is_empty() {
                return None;
            }
        }
        let names = self.list(e)?;
        if names.iter().any(|n| n == "*") {
            return Some(Spawns::Any);
        }
        Some(Spawns::Only(names))
    }

    /// Claude Code's `effort`: `low|medium|high|xhigh` as thinking levels of the same name, and
    /// `max` as `xhigh`, the highest level there is (docs/personas.md §2.7).
    pub(in crate::persona) fn effort(&mut self, e: &Entry) -> Option<ThinkingLevel> {
        let text = match &e.value {
            Yaml::String(s) => s.trim().to_owned(),
            Yaml::Null => return None,
            _ => String::new(),
        };
        let level = match text.as_str() {
            "low" => ThinkingLevel::Low,
            "medium" => ThinkingLevel::Medium,
            "high" => ThinkingLevel::High,
            "xhigh" | "max" => ThinkingLevel::Xhigh,
            _ => {
                self.warn(
                    e,
                    "invalid_effort",
                    format!(
                        "`{}` must be one of low, medium, high, xhigh, max; ignored",
                        e.raw_key
                    ),
                );
                return None;
            }
        };
        Some(level)
    }

    pub(in crate::persona) fn thinking(&mut self, e: &Entry) -> Option<ThinkingLevel> {
        let text = match &e.value {
            Yaml::String(s) => s.trim().to_owned(),
            Yaml::Null => return None,
            other => serde_yaml::to_string(other)
                .unwrap_or_default()
                .trim()
                .to_owned(),
        };
        let t = ThinkingLevel::parse(&text);
        if t.is_none() {
            self.warn(
                e,
                "invalid_thinking_level",
                format!(
                    "`{}: {text}` is not one of off, minimal, low, medium, high, xhigh; ignored",
                    e.raw_key
                ),
            );
        }
        t
    }

    /// A positive integer (`max_turns`, `timeout_mins`); anything else is a warning `code` and
    /// the key is ignored.
    pub(in crate::persona) fn positive(&mut self, e: &Entry, code: &'static str) -> Option<u32> {
        let n = match &e.value {
            Yaml::Number(n) => n.as_u64(),
            Yaml::String(s) => s.trim().parse::<u64>().ok(),
            Yaml::Null => return None,
            _ => None,
        };
        match n.and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0) {
            Some(n) => Some(n),
            None => {
                let shown = serde_yaml::to_string(&e.value).unwrap_or_default();
                self.warn(
                    e,
                    code,
                    format!(
                        "`{}: {}` is not a positive integer; ignored",
                        e.raw_key,
                        shown.trim()
                    ),
                );
                None
            }
        }
    }

    /// Gemini's `temperature`: a number from 0 to 2 (a numeric string too, as the line fallback
    /// reads every value as a string); anything else is a warning and the key is ignored.
    pub(in crate::persona) fn temperature(&mut self, e: &Entry) -> Option<f64> {
        let t = match &e.value {
            Yaml::Number(n) => n.as_f64(),
            Yaml::String(s) => s.trim().parse::<f64>().ok(),
            Yaml::Null => return None,
            _ => None,
        };
        match t.filter(|t| (0.0..=2.0).contains(t)) {
            Some(t) => Some(t),
            None => {
                let shown = serde_yaml::to_string(&e.value).unwrap_or_default();
                self.warn(
                    e,
                    "invalid_temperature",
                    format!(
                        "`{}: {}` is not a number from 0 to 2; ignored",
                        e.raw_key,
                        shown.trim()
                    ),
                );
                None
            }
        }
    }

    /// Gemini's `kind`: `local` (the default) or `remote`; anything else is a warning and the
    /// agent is read as local.
    pub(in crate::persona) fn remote(&mut self, e: &Entry) -> bool {
        match &e.value {
            Yaml::String(s) if s.trim() == "remote" => true,
            Yaml::String(s) if s.trim() == "local" => false,
            Yaml::Null => false,
            other => {
                let shown = serde_yaml::to_string(other).unwrap_or_default();
                self.warn(
                    e,
                    "invalid_kind",
                    format!(
                        "`{}: {}` is neither `local` nor `remote`; read as local",
                        e.raw_key,
                        shown.trim()
                    ),
                );
                false
            }
        }
    }
}

/// Converts a YAML value to JSON. Tagged values lose their tag; non-string keys become strings;
/// non-finite floats become strings (JSON has no NaN).
pub(in crate::persona) fn yaml_to_json(v: Yaml) -> Json {
    match v {
        Yaml::Null => Json::Null,
        Yaml::Bool(b) => Json::Bool(b),
        Yaml::Number(n) => {
            if let Some(i) = n.as_i64() {
                Json::from(i)
            } else if let Some(u) = n.as_u64() {
                Json::from(u)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                serde_json::Number::from_f64(f)
                    .map(Json::Number)
                    .unwrap_or_else(|| Json::String(n.to_string()))
            }
        }
        Yaml::String(s) => Json::String(s),
        Yaml::Sequence(items) => Json::Array(items.into_iter().map(yaml_to_json).collect()),
        Yaml::Mapping(m) => Json::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let k = match k {
                        Yaml::String(s) => s,
                        other => serde_yaml::to_string(&other)
                            .unwrap_or_default()
                            .trim()
                            .to_owned(),
                    };
                    (k, yaml_to_json(v))
                })
                .collect(),
        ),
        Yaml::Tagged(t) => yaml_to_json(t.value),
    }
}
