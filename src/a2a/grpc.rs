//! The A2A gRPC binding `lf.a2a.v1.A2AService` (docs/a2a.md §13.2), on agentry's gRPC port. The
//! agent is the request's `tenant` (the card's gRPC interface names it; empty =
//! `a2a.default_agent`). Each call is the JSON-RPC binding's operation: the request is read as
//! its ProtoJSON (through the descriptor, `prost-reflect`), run by the shared operations (`ops`)
//! in the 1.0 dialect, and the answer written back as the response message, so the three
//! bindings cannot drift apart. Errors carry `google.rpc.ErrorInfo` with domain
//! `a2a-protocol.org`.

use std::{collections::HashMap, pin::Pin, sync::LazyLock};

use futures_util::{Stream, StreamExt};
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, SerializeOptions};
use serde_json::Value;
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::{
    A2a,
    error::{A2aError, DOMAIN, Kind},
    ops::{Call, Ctx, Outcome},
    wire::Dialect,
};
use crate::grpc::{a2a_pb as pb, request::identity, status::Violations};

/// The descriptors of `lf.a2a.v1` (with agentry's own), read once.
static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(crate::grpc::pb::FILE_DESCRIPTOR_SET)
        .expect("the compiled descriptor set decodes")
});

/// A message as its ProtoJSON (camelCase names, enum names, defaults left out).
pub(crate) fn to_json<M: prost::Message>(m: &M, name: &str) -> Result<Value, Status> {
    let desc = POOL
        .get_message_by_name(name)
        .ok_or_else(|| Status::internal(format!("no descriptor for {name}")))?;
    let dynamic = DynamicMessage::decode(desc, m.encode_to_vec().as_slice())
        .map_err(|e| Status::internal(format!("{name}: {e}")))?;
    dynamic
        .serialize_with_options(serde_json::value::Serializer, &SerializeOptions::new())
        .map_err(|e| Status::internal(format!("{name} as JSON: {e}")))
}

/// A ProtoJSON value as message `M` (fields it does not have are skipped).
fn from_json<M: prost::Message + Default>(v: Value, name: &str) -> Result<M, Status> {
    let desc = POOL
        .get_message_by_name(name)
        .ok_or_else(|| Status::internal(format!("no descriptor for {name}")))?;
    let dynamic = DynamicMessage::deserialize_with_options(
        desc,
        v,
        &DeserializeOptions::new().deny_unknown_fields(false),
    )
    .map_err(|e| Status::internal(format!("{name} from JSON: {e}")))?;
    M::decode(prost::Message::encode_to_vec(&dynamic).as_slice())
        .map_err(|e| Status::internal(format!("{name}: {e}")))
}

/// An A2A error as a gRPC status: the spec's code and `ErrorInfo` (agentry's reason in the
/// metadata when there is one).
fn status(e: A2aError) -> Status {
    let code = match e.kind {
        Kind::TaskNotFound | Kind::MethodNotFound => Code::NotFound,
        Kind::Parse | Kind::InvalidRequest | Kind::InvalidParams => Code::InvalidArgument,
        Kind::ContentTypeNotSupported => Code::InvalidArgument,
        Kind::Internal => Code::Internal,
        Kind::Unauthenticated => Code::Unauthenticated,
        Kind::PermissionDenied => Code::PermissionDenied,
        Kind::Exhausted => Code::ResourceExhausted,
        Kind::Unavailable => Code::Unavailable,
        Kind::TaskNotCancelable
        | Kind::PushNotSupported
        | Kind::Unsupported
        | Kind::ExtendedCardNotConfigured
        | Kind::VersionNotSupported => Code::FailedPrecondition,
    };
    let mut meta = HashMap::new();
    if let Some(r) = &e.agentry_reason {
        meta.insert("agentry_reason".to_owned(), r.clone());
    }
    Status::with_error_details(
        code,
        e.message,
        ErrorDetails::with_error_info(e.kind.reason(), DOMAIN, meta),
    )
}

/// The gRPC binding's service.
#[derive(Clone)]
pub struct A2aGrpc {
    a2a: A2a,
}

impl A2aGrpc {
    /// The binding over the same operations as the HTTP listener's.
    pub fn new(a2a: A2a) -> Self {
        Self { a2a }
    }

    /// Runs `call` for request `req` (its ProtoJSON are the params).
    async fn run<M: prost::Message>(
        &self,
        req: Request<M>,
        name: &str,
        call: Call,
    ) -> Result<Outcome, Status> {
        let mut v = Violations::default();
        let id = identity(&req, &mut v);
        v.check()?;
        if let Some(version) = req.metadata().get("a2a-version") {
            let ok = version
                .to_str()
                .is_ok_and(|s| s == "1.0" || s.starts_with("1.0."));
            if !ok {
                return Err(status(A2aError::new(
                    Kind::VersionNotSupported,
                    "the gRPC binding speaks A2A 1.0 only (A2A-Version: 1.0)",
                )));
            }
        }
        let params = to_json(req.get_ref(), name)?;
        let agent = match params.get("tenant").and_then(Value::as_str) {
            Some(t) if !t.is_empty() => t.to_owned(),
            _ => self.a2a.default_agent.clone().ok_or_else(|| {
                status(A2aError::params(
                    "tenant",
                    "names the agent (the card's gRPC interface gives it); there is no a2a.default_agent",
                ))
            })?,
        };
        self.a2a.agent(&id, &agent).await.map_err(status)?;
        let ctx = Ctx {
            s: &self.a2a,
            id: &id,
            agent: &agent,
            dialect: Dialect::V1,
        };
        ctx.run(call, &params).await.map_err(status)
    }

    /// The one value of a unary call as message `R`.
    async fn unary<M: prost::Message, R: prost::Message + Default>(
        &self,
        req: Request<M>,
        names: (&str, &str),
        call: Call,
    ) -> Result<Response<R>, Status> {
        match self.run(req, names.0, call).await? {
            Outcome::Value(v) => Ok(Response::new(from_json(v, names.1)?)),
            Outcome::Stream(_) => Err(Status::internal("a stream where a value was expected")),
        }
    }

    /// The events of a streaming call as `StreamResponse`s.
    async fn streaming<M: prost::Message>(
        &self,
        req: Request<M>,
        name: &str,
        call: Call,
    ) -> Result<Response<Events>, Status> {
        match self.run(req, name, call).await? {
            Outcome::Stream(events) => Ok(Response::new(Box::pin(events.map(|item| {
                item.map_err(status)
                    .and_then(|v| from_json(v, "lf.a2a.v1.StreamResponse"))
            })))),
            Outcome::Value(_) => Err(Status::internal("a value where a stream was expected")),
        }
    }
}

/// A stream of `StreamResponse`.
type Events = Pin<Box<dyn Stream<Item = Result<pb::StreamResponse, Status>> + Send>>;

#[tonic::async_trait]
impl pb::a2a_service_server::A2aService for A2aGrpc {
    async fn send_message(
        &self,
        req: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        self.unary(
            req,
            (
                "lf.a2a.v1.SendMessageRequest",
                "lf.a2a.v1.SendMessageResponse",
            ),
            Call::Send,
        )
        .await
    }

    type SendStreamingMessageStream = Events;

    async fn send_streaming_message(
        &self,
        req: Request<pb::SendMessageRequest>,
    ) -> Result<Response<Events>, Status> {
        self.streaming(req, "lf.a2a.v1.SendMessageRequest", Call::Stream)
            .await
    }

    async fn get_task(
        &self,
        req: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        self.unary(
            req,
            ("lf.a2a.v1.GetTaskRequest", "lf.a2a.v1.Task"),
            Call::Get,
        )
        .await
    }

    async fn list_tasks(
        &self,
        req: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        self.unary(
            req,
            ("lf.a2a.v1.ListTasksRequest", "lf.a2a.v1.ListTasksResponse"),
            Call::List,
        )
        .await
    }

    async fn cancel_task(
        &self,
        req: Request<pb::CancelTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        self.unary(
            req,
            ("lf.a2a.v1.CancelTaskRequest", "lf.a2a.v1.Task"),
            Call::Cancel,
        )
        .await
    }

    type SubscribeToTaskStream = Events;

    async fn subscribe_to_task(
        &self,
        req: Request<pb::SubscribeToTaskRequest>,
    ) -> Result<Response<Events>, Status> {
        self.streaming(req, "lf.a2a.v1.SubscribeToTaskRequest", Call::Subscribe)
            .await
    }

    async fn create_task_push_notification_config(
        &self,
        _: Request<pb::TaskPushNotificationConfig>,
    ) -> Result<Response<pb::TaskPushNotificationConfig>, Status> {
        Err(push_not_supported())
    }

    async fn get_task_push_notification_config(
        &self,
        _: Request<pb::GetTaskPushNotificationConfigRequest>,
    ) -> Result<Response<pb::TaskPushNotificationConfig>, Status> {
        Err(push_not_supported())
    }

    async fn list_task_push_notification_configs(
        &self,
        _: Request<pb::ListTaskPushNotificationConfigsRequest>,
    ) -> Result<Response<pb::ListTaskPushNotificationConfigsResponse>, Status> {
        Err(push_not_supported())
    }

    async fn get_extended_agent_card(
        &self,
        _: Request<pb::GetExtendedAgentCardRequest>,
    ) -> Result<Response<pb::AgentCard>, Status> {
        Err(status(A2aError::new(
            Kind::ExtendedCardNotConfigured,
            "there is no extended agent card; the public card is the whole card",
        )))
    }

    async fn delete_task_push_notification_config(
        &self,
        _: Request<pb::DeleteTaskPushNotificationConfigRequest>,
    ) -> Result<Response<()>, Status> {
        Err(push_not_supported())
    }
}

fn push_not_supported() -> Status {
    status(A2aError::new(
        Kind::PushNotSupported,
        "push notifications are not supported (the card says capabilities.pushNotifications: false); stream or poll the task",
    ))
}
