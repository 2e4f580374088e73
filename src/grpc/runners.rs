//! `agentry.v1.RunnerService/Connect` (docs/runners.md): the stream glue. Reads `hello`
//! (refusing anything else first), starts a [`Session`], then translates each runner message
//! into one session call and each hub message into a `ConnectResponse`. The rules live in
//! `workers::runners`; this module only translates and bounds the wire.

use std::{collections::BTreeMap, pin::Pin, sync::Arc};

use tokio::sync::mpsc;
use tokio_stream::{Stream, wrappers::ReceiverStream};
use tonic::{Code, Request, Response, Status, Streaming};

use super::{
    convert::{duration, spec, ts},
    pb::{self, connect_request::Msg as In, connect_response::Msg as Out},
    request,
    status::{Violations, with_info},
};
use crate::workers::{
    runners::{self, Finish, Hello, Outbound, RunnerHub, Session},
    supervisor::Supervisor,
};

/// Most labels a `hello` may carry.
pub const MAX_LABELS: usize = 64;
/// Longest label key or value, in bytes.
pub const MAX_LABEL_BYTES: usize = 256;
/// Most lease tokens a `hello` may resume.
pub const MAX_RESUME: usize = 10_000;
/// Longest lease token, in bytes.
pub const MAX_LEASE_BYTES: usize = 64;
/// Longest `finished.session_ref`, in bytes.
pub const MAX_SESSION_REF_BYTES: usize = 4 * 1024;
/// Longest `input_required.question`, in bytes.
pub const MAX_QUESTION_BYTES: usize = 64 * 1024;
/// Longest `failed.error`, in bytes.
pub const MAX_ERROR_BYTES: usize = 64 * 1024;

/// The RunnerService implementation.
pub struct RunnerService {
    /// The supervisor (progress, start records).
    pub supervisor: Arc<Supervisor>,
    /// Assignment and fencing.
    pub hub: Arc<RunnerHub>,
    /// `executor.max_output_bytes`: the bound on a completed result, as for exec's stdout.
    pub max_output_bytes: usize,
}

/// The stream type of Connect.
pub type ConnectStream = Pin<Box<dyn Stream<Item = Result<pb::ConnectResponse, Status>> + Send>>;

fn hello_required(what: &str) -> Status {
    with_info(
        Code::FailedPrecondition,
        "HELLO_REQUIRED",
        format!("the first message of a runner stream must be hello; got {what}"),
        &[],
    )
}

fn kind(m: &In) -> &'static str {
    match m {
        In::Hello(_) => "hello",
        In::Accepted(_) => "accepted",
        In::Progress(_) => "progress",
        In::Finished(_) => "finished",
        In::Heartbeat(_) => "heartbeat",
        In::MessageDelivered(_) => "message_delivered",
        In::InputRequired(_) => "input_required",
    }
}

/// Validates a `hello` into the domain value.
fn hello(h: pb::RunnerHello) -> Result<Hello, Status> {
    let mut v = Violations::default();
    if h.name.is_empty() {
        v.add("hello.name", "must not be empty");
    } else {
        request::check_line("hello.name", &h.name, runners::MAX_NAME_BYTES, &mut v);
    }
    if h.agents.is_empty() {
        v.add(
            "hello.agents",
            "must name at least one agent, or \"*\" for any",
        );
    } else if h.agents.len() > runners::MAX_AGENTS {
        v.add(
            "hello.agents",
            format!(
                "has {} entries; the limit is {}",
                h.agents.len(),
                runners::MAX_AGENTS
            ),
        );
    } else {
        for a in &h.agents {
            if a.is_empty() {
                v.add("hello.agents", "must not contain an empty name");
            } else {
                request::check_line("hello.agents", a, crate::persona::MAX_NAME_BYTES, &mut v);
            }
        }
    }
    if h.slots == 0 || h.slots > runners::MAX_SLOTS {
        v.add(
            "hello.slots",
            format!(
                "must be between 1 and {}, got {}",
                runners::MAX_SLOTS,
                h.slots
            ),
        );
    }
    if h.labels.len() > MAX_LABELS {
        v.add(
            "hello.labels",
            format!("has {} entries; the limit is {MAX_LABELS}", h.labels.len()),
        );
    } else {
        for (k, val) in &h.labels {
            request::check_line("hello.labels", k, MAX_LABEL_BYTES, &mut v);
            request::check_line("hello.labels", val, MAX_LABEL_BYTES, &mut v);
        }
    }
    if h.capabilities.len() > MAX_LABELS {
        v.add(
            "hello.capabilities",
            format!(
                "has {} entries; the limit is {MAX_LABELS}",
                h.capabilities.len()
            ),
        );
    } else {
        for c in &h.capabilities {
            request::check_line("hello.capabilities", c, MAX_LABEL_BYTES, &mut v);
        }
    }
    if h.resume.len() > MAX_RESUME {
        v.add(
            "hello.resume",
            format!("has {} entries; the limit is {MAX_RESUME}", h.resume.len()),
        );
    } else {
        for t in &h.resume {
            request::check_line("hello.resume", t, MAX_LEASE_BYTES, &mut v);
        }
    }
    v.check()?;
    Ok(Hello {
        name: h.name,
        agents: h.agents,
        slots: h.slots,
        labels: h.labels.into_iter().collect::<BTreeMap<_, _>>(),
        resume: h.resume,
        messages: h.capabilities.iter().any(|c| c == "messages"),
        input: h.capabilities.iter().any(|c| c == "input"),
        resume_sessions: h.capabilities.iter().any(|c| c == "resume"),
    })
}

/// A hub message on the wire; `Err` ends the stream with that status.
fn outbound(o: Outbound) -> Result<pb::ConnectResponse, Status> {
    let msg = match o {
        Outbound::Welcome {
            runner_id,
            heartbeat_interval,
            lease,
        } => Out::Welcome(pb::RunnerWelcome {
            runner_id,
            heartbeat_interval: Some(duration(heartbeat_interval)),
            lease: Some(duration(lease)),
        }),
        Outbound::Assignment {
            worker_id,
            lease_token,
            assignment,
            deadline_ms,
        } => Out::Assignment(pb::RunnerAssignment {
            worker_id: worker_id.to_string(),
            lease_token,
            spec: Some(spec(&assignment.spec)),
            worker_token: assignment.worker_token.clone(),
            deadline: Some(ts(deadline_ms)),
            resume: assignment
                .runner_resume
                .as_ref()
                .map(|(previous, session_ref)| pb::RunnerResume {
                    previous_worker_id: previous.clone(),
                    session_ref: session_ref.clone(),
                }),
        }),
        Outbound::Cancel { worker_id, reason } => Out::Cancel(pb::RunnerCancel {
            worker_id: worker_id.to_string(),
            reason,
        }),
        Outbound::Rejected(r) => Out::Rejected(pb::RunnerRejected {
            worker_id: r.worker_id,
            reason: r.reason,
            code: r.code.to_owned(),
        }),
        Outbound::Message {
            worker_id,
            lease_token,
            message_id,
            text,
            interrupt,
        } => Out::Message(pb::RunnerMessage {
            worker_id: worker_id.to_string(),
            lease_token,
            message_id,
            text,
            interrupt,
        }),
        Outbound::Close { code, reason } => {
            return Err(with_info(Code::Unavailable, code, reason, &[]));
        }
    };
    Ok(pb::ConnectResponse { msg: Some(msg) })
}

/// A runner message the transport could not decode, as the runner's own error: the stream
/// ends with `INVALID_ARGUMENT` naming what was wrong, never with OK. Any other failure (the
/// connection broke) keeps its own status; nobody may be left to read it.
fn decode_error(s: &Status) -> Status {
    match super::layers::decode_failure(s) {
        Some(why) => with_info(Code::InvalidArgument, "INVALID_MESSAGE", why, &[]),
        None => s.clone(),
    }
}

/// Applies one runner message after `hello`.
async fn handle(s: &Session, m: pb::ConnectRequest, max_output: usize) {
    let Some(m) = m.msg else {
        return s.refuse(
            "",
            "INVALID_MESSAGE",
            "the message is empty: set one of hello, accepted, progress, finished, heartbeat, message_delivered, input_required",
        );
    };
    match m {
        In::Hello(_) => s.refuse(
            "",
            "HELLO_REPEATED",
            "hello was already sent on this stream; open a new stream (with hello.resume) to start a new session",
        ),
        In::Heartbeat(_) => {}
        In::MessageDelivered(d) => s.delivered(&d.worker_id, &d.lease_token).await,
        In::InputRequired(q) => {
            let question = match q.question.trim() {
                "" => Err("input_required.question must not be empty".to_owned()),
                t if t.len() > MAX_QUESTION_BYTES => Err(format!(
                    "input_required.question is {} bytes; the limit is {MAX_QUESTION_BYTES} bytes",
                    t.len()
                )),
                t => Ok(t.to_owned()),
            };
            s.input_required(&q.worker_id, &q.lease_token, question)
                .await;
        }
        In::Accepted(a) => s.accepted(&a.worker_id, &a.lease_token),
        In::Progress(p) => {
            let mut v = Violations::default();
            let report = request::progress("progress.", p.kind, p.text, p.data_json, &mut v);
            let report = match v.check() {
                Ok(()) => Ok(report),
                Err(status) => Err(status.message().to_owned()),
            };
            s.progress(&p.worker_id, &p.lease_token, report).await;
        }
        In::Finished(f) => {
            use pb::runner_finished::Outcome;
            let finish = match f.outcome {
                None => {
                    return s.refuse(
                        &f.worker_id,
                        "INVALID_MESSAGE",
                        "finished needs an outcome: completed, failed, canceled or rejected",
                    );
                }
                Some(Outcome::Completed(c)) if c.result.len() > max_output => Finish::Failed {
                    error: format!(
                        "the result is {} bytes; the limit (executor.max_output_bytes) is {max_output}",
                        c.result.len()
                    ),
                    exit_code: None,
                },
                Some(Outcome::Completed(c)) => Finish::Completed { result: c.result },
                Some(Outcome::Failed(e)) if e.error.len() > MAX_ERROR_BYTES => {
                    return s.refuse(
                        &f.worker_id,
                        "INVALID_MESSAGE",
                        format!(
                            "failed.error is {} bytes; the limit is {MAX_ERROR_BYTES} bytes",
                            e.error.len()
                        ),
                    );
                }
                Some(Outcome::Failed(e)) => Finish::Failed {
                    error: if e.error.trim().is_empty() {
                        "the runner reported a failure without a reason".to_owned()
                    } else {
                        e.error
                    },
                    exit_code: e.exit_code,
                },
                Some(Outcome::Canceled(_)) => Finish::Canceled,
                Some(Outcome::Rejected(r)) if r.reason.len() > MAX_ERROR_BYTES => {
                    return s.refuse(
                        &f.worker_id,
                        "INVALID_MESSAGE",
                        format!(
                            "rejected.reason is {} bytes; the limit is {MAX_ERROR_BYTES} bytes",
                            r.reason.len()
                        ),
                    );
                }
                Some(Outcome::Rejected(r)) => Finish::Rejected {
                    reason: if r.reason.trim().is_empty() {
                        "the agent declined the task without a reason".to_owned()
                    } else {
                        r.reason
                    },
                },
            };
            if f.session_ref.len() > MAX_SESSION_REF_BYTES {
                return s.refuse(
                    &f.worker_id,
                    "INVALID_MESSAGE",
                    format!(
                        "finished.session_ref is {} bytes; the limit is {MAX_SESSION_REF_BYTES} bytes",
                        f.session_ref.len()
                    ),
                );
            }
            let session_ref = (!f.session_ref.is_empty()).then_some(f.session_ref);
            s.finished(&f.worker_id, &f.lease_token, finish, session_ref);
        }
    }
}

#[tonic::async_trait]
impl pb::runner_service_server::RunnerService for RunnerService {
    type ConnectStream = ConnectStream;

    async fn connect(
        &self,
        req: Request<Streaming<pb::ConnectRequest>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        // A runner is its principal's agent, never a worker's: a worker that opened a session
        // would be handed other workers' assignments and tokens (more rights than its own), and
        // could be offered the reviewer of its own review. So a worker token is refused here
        // whether or not authentication is on, bearer token or not.
        if req.metadata().contains_key(&*super::metadata::WORKER_TOKEN) {
            return Err(with_info(
                Code::Unauthenticated,
                "WORKER_TOKEN_REFUSED",
                "RunnerService/Connect does not accept x-agentry-worker-token: a runner connects as a principal (authorization: Bearer <token> when auth.tokens_file is set), never as a worker",
                &[],
            ));
        }
        let principal = req
            .extensions()
            .get::<crate::auth::Principal>()
            .map(|p| p.0.to_string());
        let mut inbound = req.into_inner();
        let lease = self.hub.settings().lease;
        let first = match tokio::time::timeout(lease, inbound.message()).await {
            Err(_) => {
                return Err(with_info(
                    Code::DeadlineExceeded,
                    "HELLO_REQUIRED",
                    format!(
                        "no hello within {} (runners.lease)",
                        crate::workers::supervisor::seconds(lease)
                    ),
                    &[],
                ));
            }
            Ok(m) => m?,
        };
        let h = match first.map(|m| m.msg) {
            None => return Err(hello_required("the end of the stream")),
            Some(None) => return Err(hello_required("an empty message")),
            Some(Some(In::Hello(h))) => hello(h)?,
            Some(Some(other)) => return Err(hello_required(kind(&other))),
        };
        let (session, mut out) =
            Session::start(self.hub.clone(), self.supervisor.clone(), h, principal)
                .map_err(|e| with_info(Code::Unavailable, "SHUTTING_DOWN", e.to_string(), &[]))?;
        let (tx, rx) = mpsc::channel(64);
        let max_output = self.max_output_bytes;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    m = inbound.message() => match m {
                        Ok(Some(m)) => {
                            session.touch();
                            handle(&session, m, max_output).await;
                        }
                        // The runner closed its side or the connection broke.
                        Ok(None) => break,
                        // A message that does not decode (over the size limit, invalid UTF-8 in
                        // a string field) ends the stream as the caller's error, as a unary call
                        // would; the session's workers then follow the runner-lost rules.
                        Err(status) => {
                            let _ = tx.send(Err(decode_error(&status))).await;
                            break;
                        }
                    },
                    o = out.recv() => {
                        let Some(o) = o else { break };
                        let msg = outbound(o);
                        let end = msg.is_err();
                        if tx.send(msg).await.is_err() || end {
                            break;
                        }
                    }
                    () = tx.closed() => break,
                }
            }
            tracing::debug!(runner_id = %session.runner_id(), "runner stream ended");
            // Dropping the session disconnects it: running workers wait a lease for a resume.
            drop(session);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
