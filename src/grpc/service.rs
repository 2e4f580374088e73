//! `AgentRegistryService`: translation only. Each method converts the request into who is
//! calling and a domain request ([`request`]), makes one call on [`App`], and converts the
//! answer ([`convert`]) or the error ([`super::status`]) back.

use std::pin::Pin;

use bytes::Bytes;
use prost::Message;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::{
    convert, pb,
    reply::ResolveReplies,
    request::{self, Workspace},
};
use crate::app::App;

/// The stream type of WatchWorker.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchWorkerResponse, Status>> + Send>>;

/// The gRPC face of [`App`].
pub struct Service {
    app: App,
    /// `ResolveAgent` answers already encoded.
    replies: ResolveReplies,
}

impl Service {
    /// Serves `app`.
    pub fn new(app: App) -> Self {
        Self {
            app,
            replies: ResolveReplies::default(),
        }
    }
}

#[tonic::async_trait]
impl pb::agent_registry_service_server::AgentRegistryService for Service {
    async fn list_agents(
        &self,
        req: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        let (id, q) = request::parse(req)?;
        let page = self.app.list_agents(&id, q).await?;
        Ok(Response::new(convert::agent_page(&page)))
    }

    async fn resolve_agent(
        &self,
        req: Request<pb::ResolveAgentRequest>,
    ) -> Result<Response<pb::ResolveAgentResponse>, Status> {
        let (id, q) = request::parse(req)?;
        let target = self.app.resolve_target(&id, &q).await?;
        if let Some(bytes) = self.replies.get(&target, &q) {
            return Ok(Response::new(pb::ResolveAgentResponse::from_encoded(bytes)));
        }
        let bytes = Bytes::from(convert::resolved(self.app.resolve(&target, &q)).encode_to_vec());
        self.replies.put(&target, &q, bytes.clone());
        Ok(Response::new(pb::ResolveAgentResponse::from_encoded(bytes)))
    }

    async fn reload_agents(
        &self,
        req: Request<pb::ReloadAgentsRequest>,
    ) -> Result<Response<pb::ReloadAgentsResponse>, Status> {
        let (id, Workspace(ws)) = request::parse(req)?;
        let snap = self.app.reload_agents(&id, &ws).await?;
        Ok(Response::new(pb::ReloadAgentsResponse {
            registry_version: snap.version.clone(),
            diagnostics: snap.all_diagnostics().map(convert::diagnostic).collect(),
        }))
    }

    async fn prune_worktrees(
        &self,
        req: Request<pb::PruneWorktreesRequest>,
    ) -> Result<Response<pb::PruneWorktreesResponse>, Status> {
        let (id, request::OlderThan(older_than)) = request::parse(req)?;
        let pruned = self.app.prune_worktrees(&id, older_than).await?;
        Ok(Response::new(pb::PruneWorktreesResponse {
            removed: pruned.removed,
            kept_live: pruned.kept_live,
            failed: pruned.failed,
        }))
    }

    async fn spawn_worker(
        &self,
        req: Request<pb::SpawnWorkerRequest>,
    ) -> Result<Response<pb::SpawnWorkerResponse>, Status> {
        let (id, r) = request::parse_limited(req, self.app.limits)?;
        let spawned = self.app.spawn_worker(&id, r).await?;
        Ok(Response::new(convert::spawned(&spawned)))
    }

    async fn stop_worker(
        &self,
        req: Request<pb::StopWorkerRequest>,
    ) -> Result<Response<pb::StopWorkerResponse>, Status> {
        let (id, r) = request::parse(req)?;
        let w = self.app.stop_worker(&id, r).await?;
        Ok(Response::new(pb::StopWorkerResponse {
            worker: Some(convert::worker(&w)),
        }))
    }

    async fn send_worker_message(
        &self,
        req: Request<pb::SendWorkerMessageRequest>,
    ) -> Result<Response<pb::SendWorkerMessageResponse>, Status> {
        let (id, r) = request::parse_limited(req, self.app.limits)?;
        let sent = self.app.send_message(&id, r).await?;
        Ok(Response::new(pb::SendWorkerMessageResponse {
            worker: Some(convert::worker(&sent.worker)),
            message_id: sent.message_id,
            continued: sent.continued,
        }))
    }

    async fn get_worker(
        &self,
        req: Request<pb::GetWorkerRequest>,
    ) -> Result<Response<pb::GetWorkerResponse>, Status> {
        let (id, worker) = request::parse(req)?;
        let w = self.app.get_worker(&id, &worker).await?;
        let mut shown = convert::worker(&w);
        if w.usage.is_some() {
            let tree = self.app.tree_usage(&w).await?;
            shown.tree_usage = convert::sum_usage(tree.iter().map(String::as_str));
        }
        Ok(Response::new(pb::GetWorkerResponse {
            worker: Some(shown),
        }))
    }

    async fn list_workers(
        &self,
        req: Request<pb::ListWorkersRequest>,
    ) -> Result<Response<pb::ListWorkersResponse>, Status> {
        let (id, q) = request::parse(req)?;
        let page = self.app.list_workers(&id, q).await?;
        Ok(Response::new(convert::workers_page(&page)))
    }

    async fn review(
        &self,
        req: Request<pb::ReviewRequest>,
    ) -> Result<Response<pb::ReviewResponse>, Status> {
        let (id, p) = request::parse(req)?;
        let verdict = self.app.review(&id, p).await?;
        Ok(Response::new(convert::verdict(verdict)))
    }

    async fn list_commands(
        &self,
        req: Request<pb::ListCommandsRequest>,
    ) -> Result<Response<pb::ListCommandsResponse>, Status> {
        let (id, q) = request::parse(req)?;
        let page = self.app.list_commands(&id, q).await?;
        Ok(Response::new(convert::command_page(&page)))
    }

    async fn resolve_command(
        &self,
        req: Request<pb::ResolveCommandRequest>,
    ) -> Result<Response<pb::ResolveCommandResponse>, Status> {
        let (id, r) = request::parse_limited(req, self.app.limits)?;
        let resolved = self.app.resolve_command(&id, r).await?;
        Ok(Response::new(convert::resolved_command(&resolved)))
    }

    async fn report_progress(
        &self,
        req: Request<pb::ReportProgressRequest>,
    ) -> Result<Response<pb::ReportProgressResponse>, Status> {
        let (id, p) = request::parse(req)?;
        let sequence = self.app.report_progress(&id, p).await?;
        Ok(Response::new(pb::ReportProgressResponse { sequence }))
    }

    type WatchWorkerStream = WatchStream;

    async fn watch_worker(
        &self,
        req: Request<pb::WatchWorkerRequest>,
    ) -> Result<Response<Self::WatchWorkerStream>, Status> {
        let (id, r) = request::parse(req)?;
        let events = self.app.watch_worker(&id, r).await?;
        Ok(Response::new(Box::pin(events.map(|ev| {
            ev.map(|ev| convert::event(&ev)).map_err(Status::from)
        }))))
    }
}
