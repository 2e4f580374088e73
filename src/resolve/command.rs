//! Workflow commands (docs §3.6): lookup by exact name (or the base name a nested command
//! answers to) and expansion of the template with the caller's arguments.

use std::sync::Arc;

use crate::{
    discovery::{CommandDef, Snapshot},
    persona::command,
};

/// Why a command could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// No command answers to the name.
    #[error("Unknown command \"{name}\". Available: {available}")]
    NotFound {
        /// Requested name.
        name: String,
        /// Comma-separated full names, or `none`.
        available: String,
    },
    /// The expansion would be bigger than a prompt may be.
    #[error(
        "expanding {name:?} with these arguments gives more than {limit} bytes, the limit of a \
         prompt (limits.max_prompt_bytes)"
    )]
    TooLarge {
        /// The command.
        name: String,
        /// `limits.max_prompt_bytes`.
        limit: usize,
    },
}

/// Looks `name` up and expands its template with `arguments`, bounded by `limit` bytes.
pub fn resolve<'a>(
    snapshot: &'a Snapshot,
    name: &str,
    arguments: &str,
    limit: usize,
) -> Result<(&'a Arc<CommandDef>, String), CommandError> {
    let def = snapshot.command(name).ok_or_else(|| {
        let names: Vec<&str> = snapshot.commands.iter().map(|c| c.name.as_str()).collect();
        CommandError::NotFound {
            name: name.to_owned(),
            available: super::available(&names, "ListCommands"),
        }
    })?;
    let expanded =
        command::expand_command(&def.name, &def.command, arguments, limit).map_err(|_| {
            CommandError::TooLarge {
                name: def.name.clone(),
                limit,
            }
        })?;
    Ok((def, expanded))
}
