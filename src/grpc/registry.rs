//! `AgentRegistryService`: translation only. Each handler validates the request into domain
//! values, calls discovery/resolve, and converts back.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::{
    convert, metadata,
    page::{self, PageToken},
    pb,
    status::{Violations, with_info},
    workers,
};
use crate::{
    discovery::Registry,
    resolve::{self, Caller, Mode, Rules},
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
    } else if name.len() > crate::persona::MAX_NAME_BYTES {
        v.add(
            field,
            format!(
                "is {} bytes; the limit is {}",
                name.len(),
                crate::persona::MAX_NAME_BYTES
            ),
        );
    }
}

/// Parses a request output schema: JSON text, bounded.
pub fn parse_schema(field: &str, s: &str, v: &mut Violations) -> Option<serde_json::Value> {
    if s.len() > MAX_SCHEMA_BYTES {
        v.add(
            field,
            format!("is {} bytes; the limit is {MAX_SCHEMA_BYTES}", s.len()),
        );
        return None;
    }
    match serde_json::from_str::<serde_json::Value>(s) {
        Ok(val) if val.is_object() || val.is_boolean() => Some(val),
        Ok(_) => {
            v.add(field, "must be a JSON object (a JSON Schema)");
            None
        }
        Err(e) => {
            v.add(field, format!("is not valid JSON: {e}"));
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
    /// The caller as known from metadata (worker tokens are added by the worker layer).
    fn caller(&self, md: &tonic::metadata::MetadataMap, v: &mut Violations) -> Caller {
        Caller::top_level().narrow(&metadata::declared(md, v))
    }
}

#[tonic::async_trait]
impl pb::agent_registry_service_server::AgentRegistryService for RegistryService {
    async fn list_agents(
        &self,
        req: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        let mut v = Violations::default();
        let caller = self.caller(req.metadata(), &mut v);
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
        ]);
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
        let caller = self.caller(req.metadata(), &mut v);
        let r = req.into_inner();
        check_name("name", &r.name, &mut v);
        check_workspace(&r.workspace, &mut v);
        let mode = parse_mode(r.mode, &mut v);
        let schema = r
            .output_schema
            .as_deref()
            .and_then(|s| parse_schema("output_schema", s, &mut v));
        v.check()?;
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
        let r = req.into_inner();
        let mut v = Violations::default();
        check_workspace(&r.workspace, &mut v);
        v.check()?;
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
        workers::stop(&self.supervisor, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn get_worker(
        &self,
        req: Request<pb::GetWorkerRequest>,
    ) -> Result<Response<pb::GetWorkerResponse>, Status> {
        workers::get(&self.supervisor, req.into_inner()).map(Response::new)
    }

    async fn list_workers(
        &self,
        req: Request<pb::ListWorkersRequest>,
    ) -> Result<Response<pb::ListWorkersResponse>, Status> {
        workers::list(&self.supervisor, req.into_inner()).map(Response::new)
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

    type WatchWorkerStream = workers::WatchStream;

    async fn watch_worker(
        &self,
        req: Request<pb::WatchWorkerRequest>,
    ) -> Result<Response<Self::WatchWorkerStream>, Status> {
        workers::watch(self.supervisor.clone(), req.into_inner()).map(Response::new)
    }
}
