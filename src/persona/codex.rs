//! Codex custom agents: one TOML document per agent (docs §2.5). `developer_instructions` is the
//! system prompt; `model` and `model_reasoning_effort` map onto the persona's fields; every other
//! key (Codex config overrides such as `sandbox_mode` or `mcp_servers`) is kept in `extra`.

use super::{Diagnostic, Format, Persona, Severity, ThinkingLevel, fields::invalid_name, tomlread};

/// The persona in a Codex agent file, or `None` after an error diagnostic.
pub(super) fn read(text: &str, path: &str, diags: &mut Vec<Diagnostic>) -> Option<Persona> {
    let entries = tomlread::entries_or_report(text, path, diags)?;
    let mut diag = |line: Option<u32>, severity, code, message: String| {
        diags.push(Diagnostic {
            path: path.to_owned(),
            line,
            severity,
            code,
            message,
        });
    };
    let mut failed = false;
    let mut p = Persona::empty(Format::Toml);
    let (mut name, mut description, mut instructions) = (None, None, None);
    for e in entries {
        let line = Some(e.line);
        // The string keys agentry reads; a value of another type skips the file.
        let mut string = |e: &tomlread::Entry| match &e.value {
            toml::Value::String(s) => Some((s.clone(), e.line)),
            other => {
                diag(
                    line,
                    Severity::Error,
                    "invalid_field",
                    format!("`{}` must be a string, not {}", e.key, other.type_str()),
                );
                failed = true;
                None
            }
        };
        match e.key.as_str() {
            "name" => name = string(&e),
            "description" => description = string(&e),
            "developer_instructions" => instructions = string(&e),
            "model" => {
                p.model = string(&e)
                    .map(|(m, _)| m.trim().to_owned())
                    .filter(|m| !m.is_empty())
                    .map(|m| vec![m]);
            }
            "model_reasoning_effort" => {
                if let Some((effort, _)) = string(&e) {
                    p.thinking_level = match effort.trim() {
                        "none" => Some(ThinkingLevel::Off),
                        "off" => None,
                        other => ThinkingLevel::parse(other),
                    };
                    if p.thinking_level.is_none() {
                        diag(
                            line,
                            Severity::Warning,
                            "invalid_thinking_level",
                            format!(
                                "`model_reasoning_effort = {effort:?}` is not one of none, minimal, \
                                 low, medium, high, xhigh; ignored"
                            ),
                        );
                    }
                }
            }
            // Codex's `[mcp_servers.<name>]` tables: the servers of this agent's workers
            // (docs/personas.md §2.9).
            "mcp_servers" => {
                let yaml = serde_yaml::to_value(tomlread::to_json(e.value))
                    .unwrap_or(serde_yaml::Value::Null);
                let (servers, problems) = super::mcp::read(&yaml);
                for why in problems {
                    diag(
                        line,
                        Severity::Warning,
                        "invalid_mcp_server",
                        format!("`mcp_servers`: {why}; that entry is ignored"),
                    );
                }
                p.mcp_servers_line = line;
                p.mcp_servers = Some(servers);
            }
            _ => {
                if super::UNSUPPORTED_FIELDS.contains(&e.key.as_str()) {
                    diag(
                        line,
                        Severity::Warning,
                        "unsupported_field",
                        format!(
                            "`{}` is not honoured by agentry: workers of this agent run without it",
                            e.key
                        ),
                    );
                }
                p.extra.insert(e.key, tomlread::to_json(e.value));
            }
        }
    }
    if failed {
        return None;
    }
    match name.map(|(n, l)| (n.trim().to_owned(), l)) {
        Some((n, _)) if n.is_empty() => {
            diag(
                None,
                Severity::Error,
                "missing_name",
                "`name` is blank".to_owned(),
            );
            failed = true;
        }
        None => {
            diag(
                None,
                Severity::Error,
                "missing_name",
                "the agent has no `name`".to_owned(),
            );
            failed = true;
        }
        Some((n, l)) => match invalid_name(&n) {
            Some(why) => {
                diag(
                    Some(l),
                    Severity::Error,
                    "invalid_name",
                    format!("name {n:?} {why}"),
                );
                failed = true;
            }
            None => p.name = n,
        },
    }
    match description.map(|(d, _)| d.trim().to_owned()) {
        Some(d) if !d.is_empty() => p.description = d,
        _ => {
            diag(
                None,
                Severity::Error,
                "missing_description",
                "the agent has no non-blank `description`".to_owned(),
            );
            failed = true;
        }
    }
    match instructions.map(|(i, _)| i.trim().to_owned()) {
        Some(i) if !i.is_empty() => p.system_prompt = i,
        Some(_) => {
            diag(
                None,
                Severity::Error,
                "missing_instructions",
                "`developer_instructions` (the system prompt) is blank".to_owned(),
            );
            failed = true;
        }
        None => {
            diag(
                None,
                Severity::Error,
                "missing_instructions",
                "the agent has no `developer_instructions` (its system prompt)".to_owned(),
            );
            failed = true;
        }
    }
    (!failed).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::super::{Parsed, parse_toml};
    use super::*;

    fn p(text: &str) -> Parsed {
        parse_toml(text.as_bytes(), "a.toml")
    }

    fn codes(r: &Parsed) -> Vec<&'static str> {
        r.diagnostics.iter().map(|d| d.code).collect()
    }

    #[test]
    fn a_full_agent() {
        let r = p(r#"
name = "reviewer-rs"
description = "Reviews Rust changes"
model = "gpt-5-codex"
model_reasoning_effort = "high"
sandbox_mode = "read-only"
nickname_candidates = ["Ferris", "Crab"]
developer_instructions = """
You review Rust.
Be terse.
"""

[mcp_servers.docs]
command = "docs-mcp"
"#);
        assert_eq!(codes(&r), ["unsupported_field"], "{:?}", r.diagnostics);
        assert_eq!(r.diagnostics[0].line, Some(6));
        let a = r.persona.unwrap();
        assert_eq!(a.name, "reviewer-rs");
        assert_eq!(a.system_prompt, "You review Rust.\nBe terse.");
        assert_eq!(a.model.as_deref(), Some(&["gpt-5-codex".to_owned()][..]));
        assert_eq!(a.thinking_level, Some(ThinkingLevel::High));
        assert_eq!(a.format, Format::Toml);
        assert_eq!(a.tools, None);
        let keys: Vec<_> = a.extra.keys().map(String::as_str).collect();
        assert_eq!(keys, ["sandbox_mode", "nickname_candidates"]);
        let Some([super::super::mcp::McpRef::Inline(docs)]) = a.mcp_servers.as_deref() else {
            panic!("{:?}", a.mcp_servers)
        };
        assert_eq!(
            (docs.name.as_str(), docs.command.as_slice()),
            ("docs", &["docs-mcp".to_owned()][..])
        );
    }

    #[test]
    fn effort_none_is_off_and_unknown_is_a_warning() {
        let base = "name = \"a\"\ndescription = \"d\"\ndeveloper_instructions = \"x\"\n";
        let r = p(&format!("{base}model_reasoning_effort = \"none\"\n"));
        assert_eq!(r.persona.unwrap().thinking_level, Some(ThinkingLevel::Off));
        for bad in ["off", "huge"] {
            let r = p(&format!("{base}model_reasoning_effort = \"{bad}\"\n"));
            assert_eq!(codes(&r), ["invalid_thinking_level"]);
            assert_eq!(r.diagnostics[0].line, Some(4));
            assert_eq!(r.persona.unwrap().thinking_level, None);
        }
    }

    #[test]
    fn syntax_error_with_its_line() {
        let r = p("name = \"a\"\ndescription = d\n");
        assert_eq!(codes(&r), ["toml_syntax"]);
        assert_eq!(r.diagnostics[0].line, Some(2));
        assert_eq!(r.diagnostics[0].severity, Severity::Error);
        assert!(r.persona.is_none());
    }

    #[test]
    fn missing_or_mistyped_required_keys() {
        let r = p("name = \"a\"\ndescription = \"d\"\n");
        assert_eq!(codes(&r), ["missing_instructions"]);
        let r = p("name = \"a\"\ndescription = \"d\"\ndeveloper_instructions = \"  \"\n");
        assert_eq!(codes(&r), ["missing_instructions"]);
        let r = p("name = \"a\"\ndescription = \"d\"\ndeveloper_instructions = [\"x\"]\n");
        assert_eq!(codes(&r), ["invalid_field"]);
        assert_eq!(r.diagnostics[0].line, Some(3));
        assert!(
            r.diagnostics[0].message.contains("array"),
            "{:?}",
            r.diagnostics
        );
        let r = p("developer_instructions = \"x\"\n");
        assert_eq!(codes(&r), ["missing_name", "missing_description"]);
        let r = p("name = \"a/b\"\ndescription = \"d\"\ndeveloper_instructions = \"x\"\n");
        assert_eq!(codes(&r), ["invalid_name"]);
        let r = p("name = 7\ndescription = \"d\"\ndeveloper_instructions = \"x\"\n");
        assert_eq!(codes(&r), ["invalid_field"]);
    }

    #[test]
    fn not_utf8_is_reported() {
        let r = parse_toml(b"name = \"\xff\"\n", "a.toml");
        assert_eq!(codes(&r), ["not_utf8"]);
    }
}
