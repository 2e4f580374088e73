//! Normalised entries into a [`Persona`] (docs §2.3, §2.6): each known field read and coerced,
//! `Agent`/`Task` tool entries into the spawn tool and its rights, the required fields checked,
//! the rest kept in `extra`.

use std::borrow::Cow;

use serde_yaml::Value as Yaml;

use crate::persona::{Format, Persona, Severity, Spawns, split::Block};

use super::{
    DiagFn, ParseOptions,
    entries::{Entry, normalise_key, trimmed},
    reader::{Reader, invalid_name, yaml_to_json},
};

/// Reads normalised entries into a persona and checks the required fields.
pub(super) fn finish(
    block: &Block,
    body: String,
    opts: &ParseOptions,
    diag: &mut DiagFn<'_>,
    entries: Vec<Entry>,
) -> Option<Persona> {
    let mut r = Reader::new(block, diag);
    let mut p = Persona {
        system_prompt: body,
        ..Persona::empty(Format::Markdown)
    };
    let mut name = None;
    let mut description = None;
    let mut thinking_given = false;
    let mut tools_line = None;
    // Keys already read, to warn about repeats: the entries' own, moved here once read.
    let mut seen: hashbrown::HashSet<Cow<'static, str>> =
        hashbrown::HashSet::with_capacity(entries.len());
    for mut e in entries {
        let repeated = seen.contains(&e.key);
        if repeated {
            r.warn(
                &e,
                "duplicate_key",
                format!(
                    "`{}` repeats an earlier key; the later value wins",
                    e.raw_key
                ),
            );
        }
        match &*e.key {
            "name" => name = r.take_string(&mut e),
            "description" => description = r.take_string(&mut e),
            "when_to_use" => p.when_to_use = r.take_string(&mut e),
            "disallowed_tools" => p.disallowed_tools = r.take_list(&mut e),
            "spawns" => p.spawns = r.spawns(&e),
            "model" => p.model = r.take_list(&mut e),
            "thinking_level" | "thinking" => {
                if let Some(t) = r.thinking(&e) {
                    p.thinking_level = Some(t);
                    thinking_given = true;
                }
            }
            "effort" => {
                if let Some(t) = r.effort(&e)
                    && !thinking_given
                {
                    p.thinking_level = Some(t);
                }
            }
            "output" => {
                let schema = yaml_to_json(e.value.clone());
                match crate::schema::check_schema_value(&schema) {
                    Ok(()) => p.output = Some(schema),
                    Err(why) => r.error(&e, "invalid_output_schema", why.to_string()),
                }
            }
            "permission_mode" => {
                p.permission_mode = r
                    .take_string(&mut e)
                    .map(|m| crate::persona::PermissionMode::parse(&m));
                if let Some(m) = &p.permission_mode
                    && !m.is_known()
                {
                    r.warn(
                        &e,
                        "unknown_permission_mode",
                        format!(
                            "permission mode {:?} is none of {}; it is passed through as written",
                            m.as_str(),
                            crate::persona::PERMISSION_MODES.join(", ")
                        ),
                    );
                }
            }
            "tools" => {
                tools_line = r.line(&e);
                p.tools = r.take_list(&mut e);
            }
            "max_turns" => p.max_turns = r.positive(&e, "invalid_max_turns"),
            "critical_reminder" => p.critical_reminder = r.take_string(&mut e),
            "temperature" => p.temperature = r.temperature(&e),
            "timeout_mins" => p.timeout_mins = r.positive(&e, "invalid_timeout_mins"),
            "kind" => p.remote = r.remote(&e),
            "memory" => match r.string(&e).as_deref().map(str::trim) {
                Some(scope @ ("user" | "project" | "local")) => p.memory = Some(scope.to_owned()),
                Some(other) => r.warn(
                    &e,
                    "invalid_memory",
                    format!(
                        "`{}` must be user, project or local, got {other:?}; ignored",
                        e.raw_key
                    ),
                ),
                None => {}
            },
            "mcp_servers" => {
                let (servers, problems) = crate::persona::mcp::read(&e.value);
                for why in problems {
                    r.warn(
                        &e,
                        "invalid_mcp_server",
                        format!("`{}`: {why}; that entry is ignored", e.raw_key),
                    );
                }
                p.mcp_servers_line = r.line(&e);
                p.mcp_servers = Some(servers);
            }
            "skills" => {
                p.skills_line = r.line(&e);
                p.skills = r.take_list(&mut e).unwrap_or_default();
            }
            "background" => match &e.value {
                Yaml::Bool(b) => p.background = *b,
                _ => r.warn(
                    &e,
                    "invalid_field",
                    format!("`{}` must be true or false; ignored", e.raw_key),
                ),
            },
            "isolation" => match r.string(&e).as_deref().map(str::trim) {
                Some("worktree") => p.worktree = Some(true),
                Some("none") => p.worktree = Some(false),
                Some(other) => r.warn(
                    &e,
                    "invalid_isolation",
                    format!(
                        "`{}` must be worktree or none, got {other:?}; ignored",
                        e.raw_key
                    ),
                ),
                None => {}
            },
            _ => {
                if crate::persona::UNSUPPORTED_FIELDS.contains(&&*e.key) {
                    r.warn(
                        &e,
                        "unsupported_field",
                        format!(
                            "`{}` is not honoured by agentry: workers of this agent run without it",
                            e.raw_key
                        ),
                    );
                }
                p.extra
                    .insert(e.raw_key.into_owned(), yaml_to_json(e.value));
            }
        }
        if !repeated {
            seen.insert(e.key);
        }
    }

    let open = Some(block.open_line);
    match name.map(trimmed).filter(|n| !n.is_empty()) {
        None => {
            (r.diag)(
                open,
                Severity::Error,
                "missing_name",
                "frontmatter has no non-empty `name`".to_owned(),
            );
            r.failed = true;
        }
        Some(n) => match invalid_name(&n) {
            Some(why) => {
                (r.diag)(
                    open,
                    Severity::Error,
                    "invalid_name",
                    format!("name {n:?} {why}"),
                );
                r.failed = true;
            }
            None => p.name = n,
        },
    }
    match description.map(trimmed).filter(|d| !d.is_empty()) {
        None => {
            (r.diag)(
                open,
                Severity::Error,
                "missing_description",
                "frontmatter has no non-empty `description`".to_owned(),
            );
            r.failed = true;
        }
        Some(d) => p.description = d,
    }
    if r.failed {
        return None;
    }
    if p.remote
        && !p.extra.keys().any(|k| {
            matches!(
                normalise_key(k).as_str(),
                "agent_card_url" | "agent_card_json"
            )
        })
    {
        (r.diag)(
            open,
            Severity::Warning,
            "missing_agent_card",
            "a `kind: remote` agent should say where its A2A agent card is \
             (`agent_card_url` or `agent_card_json`)"
                .to_owned(),
        );
    }

    // `Agent(a, b)` / `Task(a, b)` in the tool lists: the spawn tool, with those spawn rights.
    if let Some(granted) = p
        .tools
        .as_mut()
        .and_then(|t| spawn_entries(t, &opts.spawn_tool))
    {
        p.spawns = Some(match p.spawns.take() {
            None => granted,
            Some(declared) => {
                let both = intersect(&declared, &granted);
                (r.diag)(
                    tools_line,
                    Severity::Warning,
                    "spawns_intersected",
                    format!(
                        "`spawns` and the Agent(…) entry of `tools` both say which agents may be spawned; the worker may spawn only those both allow: {}",
                        match &both {
                            Spawns::Any => "*".to_owned(),
                            Spawns::Only(n) if n.is_empty() => "none".to_owned(),
                            Spawns::Only(n) => n.join(", "),
                        }
                    ),
                );
                both
            }
        });
    }
    if let Some(d) = p.disallowed_tools.as_mut() {
        // Disallowing `Agent` (in any form) disallows the spawn tool.
        let _ = spawn_entries(d, &opts.spawn_tool);
    }

    // Implicit tools, then the compatibility rule for `spawns`.
    if let Some(tools) = &mut p.tools {
        for t in &opts.implicit_tools {
            if !tools.contains(t) {
                tools.push(t.clone());
            }
        }
        if p.spawns.is_none() && tools.contains(&opts.spawn_tool) {
            p.spawns = Some(Spawns::Any);
        }
    }
    Some(p)
}

/// Replaces every `Agent` / `Task` (with or without an agent list) in `tools` by the spawn tool,
/// once, and returns the union of the rights they grant; `None` when there is none.
fn spawn_entries(tools: &mut Vec<String>, spawn_tool: &str) -> Option<Spawns> {
    let mut granted: Option<Spawns> = None;
    let mut at = None;
    let mut i = 0;
    while i < tools.len() {
        let Some(s) = crate::persona::spawn_entry(&tools[i]) else {
            i += 1;
            continue;
        };
        granted = Some(match (granted.take(), s) {
            (None, s) => s,
            (Some(Spawns::Any), _) | (_, Spawns::Any) => Spawns::Any,
            (Some(Spawns::Only(mut a)), Spawns::Only(b)) => {
                for n in b {
                    if !a.contains(&n) {
                        a.push(n);
                    }
                }
                Spawns::Only(a)
            }
        });
        tools.remove(i);
        at.get_or_insert(i);
    }
    let at = at?;
    if !tools.iter().any(|t| t == spawn_tool) {
        tools.insert(at.min(tools.len()), spawn_tool.to_owned());
    }
    granted
}

/// The agents both policies allow.
fn intersect(a: &Spawns, b: &Spawns) -> Spawns {
    match (a, b) {
        (Spawns::Any, x) | (x, Spawns::Any) => x.clone(),
        (Spawns::Only(x), Spawns::Only(y)) => {
            Spawns::Only(x.iter().filter(|n| y.contains(n)).cloned().collect())
        }
    }
}
