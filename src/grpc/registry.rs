//! `AgentRegistryService`: translation only. Each handler validates the request into domain
//! values, calls discovery/resolve, and converts back.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::{
    convert,
    page::{self, PageToken},
    pb,
    status::{Violations, with_info},
    workers,
};
use crate::{
    discovery::Registry,
    resolve::{self, Mode, Rules},
    workers::supervisor::{Identity, Lineage, Visibility},
};

/// Longest accepted workspace path, in bytes.
pub const MAX_WORKSPACE_BYTES: usize = 4096;
/// Largest accepted request output schema, in bytes.
pub const MAX_SCHEMA_BYTES: usize = 256 * 1024;

/// Shared state of the service's RPCs.
pub struct RegistryService {
    /// Snapshots per workspace.
    pub registry: Arc<Registry>,
    /// Resolution settings.
    pub rules: Arc<Rules>,
    /// The worker supervisor.
    pub supervisor: Arc<crate::workers::supervisor::Supervisor>,
    /// `limits.max_prompt_bytes`.
    pub max_prompt_bytes: usize,
    /// `auth.operators`: principals that see and stop every worker.
    pub operators: Arc<Vec<String>>,
}

/// Checks a request workspace: bounded, absolute when given.
pub fn check_workspace(ws: &str, v: &mut Violations) {
    if ws.len() > MAX_WORKSPACE_BYTES {
        v.add(
            "workspace",
            format!("is {} bytes; the limit is {MAX_WORKSPACE_BYTES}", ws.len()),
        );
    } else if !ws.is_empty() && !ws.starts_with('/') {
        v.add("workspace", format!("must be an absolute path, got {ws:?}"));
    } else if ws.contains('\0') {
        v.add("workspace", "must not contain NUL");
    }
}

fn check_name(field: &str, name: &str, v: &mut Violations) {
    if name.is_empty() {
        v.add(field, "must not be empty");
    } else {
        super::request::check_line(field, name, crate::persona::MAX_NAME_BYTES, v);
    }
}

/// Parses a request output schema: JSON text, bounded, and a usable JSON Schema — the same
/// check for `ResolveAgent` and `SpawnWorker`, so what one accepts the other runs.
pub fn parse_schema(field: &str, s: &str, v: &mut Violations) -> Option<serde_json::Value> {
    if s.len() > MAX_SCHEMA_BYTES {
        v.add(
            field,
            format!("is {} bytes; the limit is {MAX_SCHEMA_BYTES}", s.len()),
        );
        return None;
    }
    match crate::schema::check_schema(s) {
        Ok(val) => Some(val),
        Err(e) => {
            v.add(field, e.to_string());
            None
        }
    }
}

/// Reads the mode enum.
pub fn parse_mode(m: i32, v: &mut Violations) -> Mode {
    match pb::Mode::try_from(m) {
        Ok(pb::Mode::Plan) => Mode::Plan,
        Ok(_) => Mode::Default,
        Err(_) => {
            v.add("mode", format!("unknown mode {m}"));
            Mode::Default
        }
    }
}

impl RegistryService {
    /// Who is calling, from metadata and (with auth) the request's principal; problems are added
    /// to `v`. [`Self::lineage`] then resolves it against the service's records.
    fn identity<T>(&self, req: &Request<T>, v: &mut Violations) -> Identity {
        workers::identity(req.metadata(), principal(req), v)
    }

    /// The caller's lineage: a worker token is looked up (unknown or ended → `UNAUTHENTICATED`)
    /// on every RPC, so a worker sees one lineage everywhere (docs §5.1).
    async fn lineage(&self, id: &Identity) -> Result<Lineage, Status> {
        Ok(self.supervisor.lineage(id).await?)
    }

    /// Which workers the caller may see (docs §8.2): all without auth or for an operator, else
    /// only its own principal's.
    fn visibility<T>(&self, req: &Request<T>) -> Visibility {
        match principal(req) {
            None => Visibility::All,
            Some(p) if self.operators.contains(&p) => Visibility::All,
            Some(p) => Visibility::Principal(p),
        }
    }
}

impl RegistryService {
    /// What the caller of a worker RPC may see; a worker token it sends must be live.
    async fn worker_caller<T: Sync>(&self, req: &Request<T>) -> Result<Visibility, Status> {
        let mut v = Violations::default();
        let id = self.identity(req, &mut v);
        v.check()?;
        self.lineage(&id).await?;
        Ok(self.visibility(req))
    }
}

/// The authenticated principal of a request, when authentication is on.
fn principal<T>(req: &Request<T>) -> Option<String> {
    req.extensions()
        .get::<crate::auth::Principal>()
        .map(|p| p.0.clone())
}

#[tonic::async_trait]
impl pb::agent_registry_service_server::AgentRegistryService for RegistryService {
    async fn list_agents(
        &self,
        req: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        let mut v = Violations::default();
        let id = self.identity(&req, &mut v);
        let r = req.into_inner();
        check_workspace(&r.workspace, &mut v);
        let view = match pb::AgentView::try_from(r.view) {
            Ok(pb::AgentView::Catalog) => pb::AgentView::Catalog,
            Ok(_) => pb::AgentView::Full,
            Err(_) => {
                v.add("view", format!("unknown view {}", r.view));
                pb::AgentView::Full
            }
        };
        let page_size = page::page_size(r.page_size, &mut v);
        v.check()?;
        let caller = self.lineage(&id).await?.caller;
        // The token is bound to everything that shapes the listing: the caller's lineage only
        // shapes the catalog view.
        let catalog_view = view == pb::AgentView::Catalog;
        let lineage = if catalog_view {
            format!("{caller:?}")
        } else {
            String::new()
        };
        let query = page::query_hash(&[
            &r.workspace,
            view.as_str_name(),
            if r.include_shadowed { "1" } else { "0" },
            &lineage,
            &page_size.to_string(),
        ]);
        let mut v = Violations::default();
        let token = page::page_token(&r.page_token, &query, &mut v);
        v.check()?;

        let snap = self.registry.snapshot(&r.workspace).await?;
        if let Some(t) = &token
            && t.at != snap.version
        {
            return Err(with_info(
                tonic::Code::Aborted,
                "REGISTRY_CHANGED",
                format!(
                    "the agent registry changed during pagination (version {} → {}); restart the listing without a page_token",
                    t.at, snap.version
                ),
                &[("registry_version", &snap.version)],
            ));
        }
        let all: Vec<&Arc<crate::discovery::AgentDef>> = if catalog_view {
            resolve::catalog(&snap, &caller, &self.rules)
        } else {
            snap.agents.iter().collect()
        };
        let offset = token.map_or(0, |t| t.offset).min(all.len());
        let end = (offset + page_size).min(all.len());
        let first = offset == 0;
        let next_page_token = if end < all.len() {
            PageToken {
                offset: end,
                at: snap.version.clone(),
                query,
            }
            .encode()
        } else {
            String::new()
        };
        Ok(Response::new(pb::ListAgentsResponse {
            agents: all[offset..end].iter().map(|a| convert::agent(a)).collect(),
            shadowed: if first && r.include_shadowed {
                snap.shadowed.iter().map(|a| convert::agent(a)).collect()
            } else {
                Vec::new()
            },
            diagnostics: if first {
                snap.diagnostics.iter().map(convert::diagnostic).collect()
            } else {
                Vec::new()
            },
            registry_version: snap.version.clone(),
            catalog_markdown: if first && catalog_view {
                resolve::catalog_markdown(&all)
            } else {
                String::new()
            },
            next_page_token,
            total_size: i32::try_from(all.len()).unwrap_or(i32::MAX),
        }))
    }

    async fn resolve_agent(
        &self,
        req: Request<pb::ResolveAgentRequest>,
    ) -> Result<Response<pb::ResolveAgentResponse>, Status> {
        let mut v = Violations::default();
        let id = self.identity(&req, &mut v);
        let r = req.into_inner();
        check_name("name", &r.name, &mut v);
        check_workspace(&r.workspace, &mut v);
        let mode = parse_mode(r.mode, &mut v);
        let schema = r
            .output_schema
            .as_deref()
            .and_then(|s| parse_schema("output_schema", s, &mut v));
        v.check()?;
        let caller = self.lineage(&id).await?.caller;
        let snap = self.registry.snapshot(&r.workspace).await?;
        let def = snap
            .get(&r.name)
            .ok_or_else(|| resolve::unknown_agent(&snap, &r.name))?;
        let eff = resolve::effective(def, &snap, &caller, mode, schema.as_ref(), &self.rules);
        Ok(Response::new(pb::ResolveAgentResponse {
            agent: Some(convert::agent(def)),
            effective: Some(convert::effective(&eff)),
            registry_version: snap.version.clone(),
        }))
    }

    async fn reload_agents(
        &self,
        req: Request<pb::ReloadAgentsRequest>,
    ) -> Result<Response<pb::ReloadAgentsResponse>, Status> {
        let mut v = Violations::default();
        let id = self.identity(&req, &mut v);
        let r = req.into_inner();
        check_workspace(&r.workspace, &mut v);
        v.check()?;
        self.lineage(&id).await?;
        let snap = self.registry.reload(&r.workspace).await?;
        tracing::info!(
            version = %snap.version,
            agents = snap.agents.len(),
            commands = snap.commands.len(),
            diagnostics = snap.all_diagnostics().count(),
            "agents reloaded"
        );
        Ok(Response::new(pb::ReloadAgentsResponse {
            registry_version: snap.version.clone(),
            diagnostics: snap.all_diagnostics().map(convert::diagnostic).collect(),
        }))
    }

    async fn spawn_worker(
        &self,
        req: Request<pb::SpawnWorkerRequest>,
    ) -> Result<Response<pb::SpawnWorkerResponse>, Status> {
        workers::spawn(&self.supervisor, self.max_prompt_bytes, req)
            .await
            .map(Response::new)
    }

    async fn stop_worker(
        &self,
        req: Request<pb::StopWorkerRequest>,
    ) -> Result<Response<pb::StopWorkerResponse>, Status> {
        let vis = self.worker_caller(&req).await?;
        workers::stop(&self.supervisor, &vis, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn get_worker(
        &self,
        req: Request<pb::GetWorkerRequest>,
    ) -> Result<Response<pb::GetWorkerResponse>, Status> {
        let vis = self.worker_caller(&req).await?;
        workers::get(&self.supervisor, &vis, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn list_workers(
        &self,
        req: Request<pb::ListWorkersRequest>,
    ) -> Result<Response<pb::ListWorkersResponse>, Status> {
        let vis = self.worker_caller(&req).await?;
        workers::list(&self.supervisor, &vis, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn review(
        &self,
        req: Request<pb::ReviewRequest>,
    ) -> Result<Response<pb::ReviewResponse>, Status> {
        super::review::review(&self.supervisor, req)
            .await
            .map(Response::new)
    }

    async fn list_commands(
        &self,
        req: Request<pb::ListCommandsRequest>,
    ) -> Result<Response<pb::ListCommandsResponse>, Status> {
        super::commands::list(&self.registry, req)
            .await
            .map(Response::new)
    }

    async fn resolve_command(
        &self,
        req: Request<pb::ResolveCommandRequest>,
    ) -> Result<Response<pb::ResolveCommandResponse>, Status> {
        super::commands::resolve(&self.registry, self.max_prompt_bytes, req)
            .await
            .map(Response::new)
    }

    async fn report_progress(
        &self,
        req: Request<pb::ReportProgressRequest>,
    ) -> Result<Response<pb::ReportProgressResponse>, Status> {
        super::progress::report(&self.supervisor, req)
            .await
            .map(Response::new)
    }

    type WatchWorkerStream = workers::WatchStream;

    async fn watch_worker(
        &self,
        req: Request<pb::WatchWorkerRequest>,
    ) -> Result<Response<Self::WatchWorkerStream>, Status> {
        let vis = self.worker_caller(&req).await?;
        workers::watch(self.supervisor.clone(), &vis, req.into_inner())
            .await
            .map(Response::new)
    }
}
