//! Domain values → protobuf messages.

use super::pb;
use crate::{
    discovery::{AgentDef, SourceKind},
    persona::{Diagnostic, Format, Severity, ThinkingLevel},
    resolve::{Effective, Mode, SchemaSource, Tools},
};

fn list(v: &Option<Vec<String>>) -> Option<pb::StringList> {
    v.as_ref().map(|values| pb::StringList {
        values: values.clone(),
    })
}

/// Proto enum value of a thinking level.
pub fn thinking(t: Option<ThinkingLevel>) -> i32 {
    (match t {
        None => pb::ThinkingLevel::Unspecified,
        Some(ThinkingLevel::Off) => pb::ThinkingLevel::Off,
        Some(ThinkingLevel::Minimal) => pb::ThinkingLevel::Minimal,
        Some(ThinkingLevel::Low) => pb::ThinkingLevel::Low,
        Some(ThinkingLevel::Medium) => pb::ThinkingLevel::Medium,
        Some(ThinkingLevel::High) => pb::ThinkingLevel::High,
        Some(ThinkingLevel::Xhigh) => pb::ThinkingLevel::Xhigh,
    }) as i32
}

/// Proto enum value of a file format.
pub fn format(f: Format) -> i32 {
    (match f {
        Format::Markdown => pb::FileFormat::Markdown,
        Format::Toml => pb::FileFormat::Toml,
    }) as i32
}

/// Proto enum value of a source rule.
pub fn source(s: SourceKind) -> i32 {
    (match s {
        SourceKind::Project => pb::Source::Project,
        SourceKind::User => pb::Source::User,
        SourceKind::Plugin => pb::Source::Plugin,
        SourceKind::Dir => pb::Source::Dir,
        SourceKind::Bundled => pb::Source::Bundled,
    }) as i32
}

/// A definition as the API shows it.
pub fn agent(a: &AgentDef) -> pb::Agent {
    let p = &a.persona;
    pb::Agent {
        name: p.name.clone(),
        description: p.description.clone(),
        system_prompt: p.system_prompt.clone(),
        when_to_use: p.when_to_use.clone(),
        tools: list(&p.tools),
        disallowed_tools: list(&p.disallowed_tools),
        spawns: p.spawns.as_ref().map(|s| s.to_policy_string()),
        model: p.model.clone().unwrap_or_default(),
        thinking_level: thinking(p.thinking_level),
        output_schema: p.output.as_ref().map(|o| o.to_string()),
        permission_mode: p.permission_mode.clone(),
        max_turns: p.max_turns,
        critical_reminder: p.critical_reminder.clone(),
        extra_json: serde_json::Value::Object(p.extra.clone()).to_string(),
        source: source(a.source),
        family: a.family.clone(),
        file_path: a.file_path.clone(),
        shadowed_by: a.shadowed_by.clone().unwrap_or_default(),
        content_sha256: a.content_sha256.clone(),
        format: format(p.format),
        temperature: p.temperature,
        timeout_mins: p.timeout_mins,
        remote: p.remote,
    }
}

/// A diagnostic as the API shows it.
pub fn diagnostic(d: &Diagnostic) -> pb::Diagnostic {
    pb::Diagnostic {
        path: d.path.clone(),
        line: d.line,
        severity: match d.severity {
            Severity::Warning => pb::Severity::Warning,
            Severity::Error => pb::Severity::Error,
        } as i32,
        code: d.code.to_owned(),
        message: d.message.clone(),
    }
}

/// The proto mode of a domain mode.
pub fn mode(m: Mode) -> i32 {
    (match m {
        Mode::Default => pb::Mode::Default,
        Mode::Plan => pb::Mode::Plan,
    }) as i32
}

/// The effective agent as the API shows it.
pub fn effective(e: &Effective) -> pb::EffectiveAgent {
    let tools = match &e.tools {
        Tools::Only(v) => pb::effective_tools::Kind::Only(pb::StringList { values: v.clone() }),
        Tools::AllExcept(v) => {
            pb::effective_tools::Kind::AllExcept(pb::StringList { values: v.clone() })
        }
    };
    pb::EffectiveAgent {
        name: e.name.clone(),
        system_prompt: e.system_prompt.clone(),
        tools: Some(pb::EffectiveTools { kind: Some(tools) }),
        spawns: e.spawns.clone(),
        model: e.model.clone(),
        thinking_level: thinking(e.thinking_level),
        max_turns: e.max_turns,
        permission_mode: e.permission_mode.clone(),
        output_schema: e.output_schema.as_ref().map(|s| s.to_string()),
        output_schema_source: (match e.output_schema_source {
            None => pb::OutputSchemaSource::Unspecified,
            Some(SchemaSource::Agent) => pb::OutputSchemaSource::Agent,
            Some(SchemaSource::Request) => pb::OutputSchemaSource::Request,
            Some(SchemaSource::Parent) => pb::OutputSchemaSource::Parent,
        }) as i32,
        mode: mode(e.mode),
        depth: e.depth,
        at_max_depth: e.at_max_depth,
    }
}
