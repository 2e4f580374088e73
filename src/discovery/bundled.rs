//! The six bundled agents (docs §3.4) and the bundled `init` command (§3.6), compiled into the
//! binary and parsed with errors fatal.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::persona::{self, Comments, ParseOptions, command};

use super::{AgentDef, CommandDef, DiscoveryError, SourceKind};

/// File name and text of each bundled persona, in precedence order.
pub(super) const FILES: [(&str, &str); 6] = [
    ("explore.md", include_str!("bundled/explore.md")),
    ("plan.md", include_str!("bundled/plan.md")),
    ("designer.md", include_str!("bundled/designer.md")),
    ("reviewer.md", include_str!("bundled/reviewer.md")),
    ("task.md", include_str!("bundled/task.md")),
    ("quick_task.md", include_str!("bundled/quick_task.md")),
];

/// File name and text of each bundled command, in precedence order.
pub(super) const COMMANDS: [(&str, &str); 1] =
    [("init.md", include_str!("bundled/commands/init.md"))];

/// Parses every bundled command; any diagnostic at all is an error, as for the personas.
pub(super) fn commands() -> Result<Vec<CommandDef>, DiscoveryError> {
    COMMANDS
        .iter()
        .map(|(file, text)| {
            let path = format!("bundled:{file}");
            let invalid = |message: String| DiscoveryError::Bundled {
                file: path.clone(),
                message,
            };
            let name =
                command::name_from_path(std::path::Path::new(file), command::Dialect::Native)
                    .map_err(invalid)?;
            let parsed = command::parse_markdown(
                text.as_bytes(),
                &path,
                Comments::Strip,
                command::Dialect::Native,
            );
            match (parsed.command, parsed.diagnostics.is_empty()) {
                (Some(c), true) => Ok(CommandDef {
                    name: name.full,
                    aliases: Vec::new(),
                    command: c,
                    source: SourceKind::Bundled,
                    family: String::new(),
                    file_path: path.clone(),
                    content_sha256: hex::encode(Sha256::digest(text.as_bytes())),
                    shadowed_by: None,
                }),
                (_, _) => Err(invalid(
                    parsed
                        .diagnostics
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                )),
            }
        })
        .collect()
}

/// Parses every bundled persona; any diagnostic at all is an error, so a broken bundled file can
/// never load half.
pub(super) fn load(opts: &ParseOptions) -> Result<Vec<Arc<AgentDef>>, DiscoveryError> {
    FILES
        .iter()
        .map(|(file, text)| {
            let path = format!("bundled:{file}");
            let parsed = persona::parse(text.as_bytes(), &path, opts, Comments::Strip);
            match (parsed.persona, parsed.diagnostics.is_empty()) {
                (Some(p), true) => Ok(Arc::new(AgentDef {
                    persona: p,
                    source: SourceKind::Bundled,
                    family: String::new(),
                    file_path: path,
                    content_sha256: hex::encode(Sha256::digest(text.as_bytes())),
                    shadowed_by: None,
                })),
                (_, _) => Err(DiscoveryError::Bundled {
                    file: path,
                    message: parsed
                        .diagnostics
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                }),
            }
        })
        .collect()
}
