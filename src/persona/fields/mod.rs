//! Reads the frontmatter block into fields (docs §2.2–§2.3, §2.6):
//! * [`entries`](self::entries) — the block as normalised entries: the fast reader, YAML, the
//!   line-by-line fallback when YAML fails;
//! * [`reader`] — typed access to an entry's value, shared with workflow commands;
//! * [`persona`] — the entries into a persona: coercions, spawn rights, required fields, `extra`.

mod entries;
mod persona;
mod reader;

use super::{Persona, Severity, split::Block};

pub use entries::normalise_key;
pub(super) use entries::{Entry, entries};
use persona::finish;
pub(super) use reader::{Reader, invalid_name, yaml_to_json};

/// Settings that change how fields are read (from the service configuration).
#[derive(Debug, Clone)]
pub struct ParseOptions {
    /// Appended to every explicit `tools` list that lacks them.
    pub implicit_tools: Vec<String>,
    /// The spawn tool; `tools` containing it implies `spawns: *` when `spawns` is absent.
    pub spawn_tool: String,
    /// `mcp.allow_inline`: project persona files may define their own MCP servers.
    pub allow_inline_mcp: bool,
    /// Says why an agent's models cannot run, for the `unknown_model` warning of agents on the
    /// model executor (docs/model.md §11.2); `None` checks nothing.
    pub model_check: Option<ModelCheck>,
}

/// The `unknown_model` check: agent name and its `model` list → the warning text, if any.
#[derive(Clone)]
pub struct ModelCheck(pub std::sync::Arc<ModelCheckFn>);

/// The function behind a [`ModelCheck`].
pub type ModelCheckFn = dyn Fn(&str, &[String]) -> Option<String> + Send + Sync;

impl std::fmt::Debug for ModelCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ModelCheck")
    }
}

impl Default for ParseOptions {
    fn default() -> Self {
        Self {
            implicit_tools: vec!["submit_result".to_owned()],
            spawn_tool: "task".to_owned(),
            model_check: None,
            allow_inline_mcp: false,
        }
    }
}

pub(super) type DiagFn<'a> = dyn FnMut(Option<u32>, Severity, &'static str, String) + 'a;

/// Reads the block and body into a persona, reporting through `diag`.
pub(super) fn read(
    block: &Block,
    body: String,
    opts: &ParseOptions,
    diag: &mut DiagFn<'_>,
) -> Option<Persona> {
    let entries = entries(block, diag);
    finish(block, body, opts, diag, entries)
}
