//! `ListWorkers` as a domain operation: the audit tree filtered by parent and state, as the
//! caller may see it, paged by a keyset cursor (`create_time:id` of the last worker returned),
//! which stays stable while workers are added, unlike an offset.

use super::{Supervisor, Visibility, WorkerError};
use crate::{
    paging::{self, PageRequest, PageToken},
    workers::{
        model::{WorkerId, WorkerRecord, WorkerState},
        store::{ListQuery, ParentFilter},
    },
};

/// A `ListWorkers` request.
#[derive(Debug, Clone)]
pub struct WorkersQuery {
    /// Which parent the workers must have.
    pub parent: ParentFilter,
    /// Allowed states; empty means every state.
    pub states: Vec<WorkerState>,
    /// Which page.
    pub page: PageRequest,
    /// Only workers of this A2A context (docs §13.3).
    pub context_id: Option<String>,
    /// Only workers of this agent.
    pub agent: Option<String>,
    /// Newest first (A2A `ListTasks`) instead of oldest first.
    pub newest_first: bool,
}

/// One page of workers.
#[derive(Debug)]
pub struct WorkersPage {
    /// Oldest first.
    pub workers: Vec<WorkerRecord>,
    /// The token of the next page, empty on the last.
    pub next_page_token: String,
}

impl Supervisor {
    /// One page of the workers `vis` may see.
    pub async fn list(
        &self,
        vis: &Visibility,
        q: &WorkersQuery,
    ) -> Result<WorkersPage, WorkerError> {
        // A token is bound to the filters, the page size and the caller's scope.
        let query = paging::query_hash(&[
            &format!("{:?}", q.parent),
            &format!("{:?}", q.states),
            &q.page.size.to_string(),
            vis.scope().unwrap_or("*"),
            q.context_id.as_deref().unwrap_or(""),
            q.agent.as_deref().unwrap_or(""),
            if q.newest_first { "desc" } else { "asc" },
        ]);
        let after = q.page.cursor(&query)?.and_then(|t| {
            let (ms, id) = t.at.split_once(':')?;
            Some((ms.parse::<i64>().ok()?, WorkerId::parse(id).ok()?))
        });
        let limit = q.page.size;
        let mut workers = self
            .store()
            .list(&ListQuery {
                parent: q.parent.clone(),
                states: q.states.clone(),
                caller_scope: vis.scope().map(str::to_owned),
                context_id: q.context_id.clone(),
                agent: q.agent.clone(),
                newest_first: q.newest_first,
                after,
                limit: limit + 1,
            })
            .await?;
        // The page also ends before its bytes would pass `limits.max_page_bytes` (one worker
        // may carry a result of up to `executor.max_output_bytes`), never before its first.
        let mut bytes = 0usize;
        let fit = workers
            .iter()
            .position(|w| {
                bytes = bytes.saturating_add(shown_bytes(w));
                bytes > self.settings.max_page_bytes
            })
            .map_or(workers.len(), |at| at.max(1));
        let next_page_token = if workers.len() > limit || fit < workers.len() {
            workers.truncate(limit.min(fit));
            let last = workers.last().expect("a page holds at least one worker");
            PageToken {
                offset: 0,
                at: format!("{}:{}", last.spec.create_time_ms, last.id),
                query,
            }
            .encode()
        } else {
            String::new()
        };
        Ok(WorkersPage {
            workers,
            next_page_token,
        })
    }
}

/// About how many bytes worker `w` takes in a listing: its texts, and a bound on the rest.
fn shown_bytes(w: &WorkerRecord) -> usize {
    let texts = [
        w.result.as_deref(),
        w.structured_result.as_deref(),
        w.error.as_deref(),
        w.usage.as_deref(),
        w.worktree.as_deref(),
        w.artifacts.as_deref(),
        Some(w.spec.description.as_str()),
        w.spec.workspace.as_deref(),
    ];
    let effective = &w.spec.effective;
    let tools = match &effective.tools {
        crate::resolve::Tools::Only(l) | crate::resolve::Tools::AllExcept(l) => l,
    };
    let lists: usize = tools
        .iter()
        .chain(effective.model.iter())
        .map(|s| s.len() + 2)
        .sum::<usize>()
        + effective.spawns.policy_len();
    texts.iter().flatten().map(|t| t.len() + 4).sum::<usize>() + lists + 512
}
