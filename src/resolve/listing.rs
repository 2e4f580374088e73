//! `ListAgents` and `ListCommands` as domain operations (docs/api.md): which entries a page
//! holds, what only the first page carries (shadowed entries, diagnostics, the catalog text),
//! and the page token that binds the next page to the request and to the registry version.

use std::sync::Arc;

use super::{Caller, Rules, catalog, catalog_markdown};
use crate::{
    discovery::{AgentDef, CommandDef, Snapshot},
    paging::{self, PageError, PageRequest},
};

/// Which agents a listing shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Every winning definition, whole.
    Full,
    /// Only what the caller may spawn (docs §5.4), with the catalog as markdown.
    Catalog,
}

/// A `ListAgents` request.
#[derive(Debug, Clone)]
pub struct AgentQuery {
    /// The workspace whose snapshot is listed (empty: none).
    pub workspace: String,
    /// Full or catalog view.
    pub view: View,
    /// Whether the first page carries the shadowed definitions.
    pub include_shadowed: bool,
    /// Which page.
    pub page: PageRequest,
}

/// One page of agents.
#[derive(Debug)]
pub struct AgentPage {
    /// The snapshot the page was cut from (its version and diagnostics).
    pub snapshot: Arc<Snapshot>,
    /// The agents of this page, in precedence order.
    pub agents: Vec<Arc<AgentDef>>,
    /// Shadowed definitions: on the first page, when asked for.
    pub shadowed: Vec<Arc<AgentDef>>,
    /// Whether this page carries the snapshot's diagnostics (the first page does).
    pub with_diagnostics: bool,
    /// The catalog as markdown: on the first page of the catalog view.
    pub catalog_markdown: String,
    /// The token of the next page, empty on the last.
    pub next_page_token: String,
    /// How many agents the whole listing has.
    pub total: usize,
}

/// Cuts the page `q` asks for out of `snapshot`, as `caller` sees it.
pub fn agents(
    snapshot: Arc<Snapshot>,
    caller: &Caller,
    rules: &Rules,
    q: &AgentQuery,
) -> Result<AgentPage, PageError> {
    let catalog_view = q.view == View::Catalog;
    // The token is bound to everything that shapes the listing; the caller's lineage only
    // shapes the catalog view.
    let lineage = if catalog_view {
        format!("{caller:?}")
    } else {
        String::new()
    };
    let query = paging::query_hash(&[
        &q.workspace,
        if catalog_view {
            "AGENT_VIEW_CATALOG"
        } else {
            "AGENT_VIEW_FULL"
        },
        if q.include_shadowed { "1" } else { "0" },
        &lineage,
        &q.page.size.to_string(),
    ]);
    let all: Vec<&Arc<AgentDef>> = if catalog_view {
        catalog(&snapshot, caller, rules)
    } else {
        snapshot.agents.iter().collect()
    };
    let w = paging::window(&q.page, query, &snapshot.version, all.len())?;
    Ok(AgentPage {
        agents: all[w.start..w.end].iter().map(|a| Arc::clone(a)).collect(),
        shadowed: if w.first && q.include_shadowed {
            snapshot.shadowed.clone()
        } else {
            Vec::new()
        },
        with_diagnostics: w.first,
        catalog_markdown: if w.first && catalog_view {
            catalog_markdown(&all)
        } else {
            String::new()
        },
        next_page_token: w.next_token,
        total: all.len(),
        snapshot,
    })
}

/// A `ListCommands` request.
#[derive(Debug, Clone)]
pub struct CommandQuery {
    /// The workspace whose snapshot is listed (empty: none).
    pub workspace: String,
    /// Whether the first page carries the shadowed commands.
    pub include_shadowed: bool,
    /// Which page.
    pub page: PageRequest,
}

/// One page of workflow commands.
#[derive(Debug)]
pub struct CommandPage {
    /// The snapshot the page was cut from (its version and diagnostics).
    pub snapshot: Arc<Snapshot>,
    /// The commands of this page, in precedence order.
    pub commands: Vec<Arc<CommandDef>>,
    /// Shadowed commands: on the first page, when asked for.
    pub shadowed: Vec<Arc<CommandDef>>,
    /// Whether this page carries the snapshot's command diagnostics (the first page does).
    pub with_diagnostics: bool,
    /// The token of the next page, empty on the last.
    pub next_page_token: String,
    /// How many commands the whole listing has.
    pub total: usize,
}

/// Cuts the page `q` asks for out of `snapshot`'s commands.
pub fn commands(snapshot: Arc<Snapshot>, q: &CommandQuery) -> Result<CommandPage, PageError> {
    let query = paging::query_hash(&[
        "commands",
        &q.workspace,
        if q.include_shadowed { "1" } else { "0" },
        &q.page.size.to_string(),
    ]);
    let all = &snapshot.commands;
    let w = paging::window(&q.page, query, &snapshot.version, all.len())?;
    Ok(CommandPage {
        commands: all[w.start..w.end].to_vec(),
        shadowed: if w.first && q.include_shadowed {
            snapshot.shadowed_commands.clone()
        } else {
            Vec::new()
        },
        with_diagnostics: w.first,
        next_page_token: w.next_token,
        total: all.len(),
        snapshot,
    })
}
