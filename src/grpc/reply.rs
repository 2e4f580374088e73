//! `ResolveAgent` answers encoded once and sent as bytes.
//!
//! A `ResolveAgent` answer is a pure function of the caller (lineage and declarations), the
//! snapshot, the agent, the mode and the request's output schema: the rules never change while
//! the service runs. [`ResolveReplies`] keeps the encoded answer for each of those it has
//! computed, so a repeated call costs a lookup and a copy instead of composing the prompt,
//! converting the definition and encoding ~1.5 KB of protobuf again. Everything before it still
//! runs on every call: authentication, lineage, the snapshot's freshness check, the span, the
//! log line and the metrics.
//!
//! For that, `agentry.v1.ResolveAgentResponse` is this hand-written [`ResolveAgentResponse`]
//! (`extern_path` in `build.rs`) instead of a generated struct: the same public fields, plus a
//! private encoding that, when present, is what goes on the wire.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock, Weak},
};

use bytes::{Buf, BufMut, Bytes};
use prost::{
    DecodeError, Message,
    encoding::{DecodeContext, WireType, message, skip_field, string},
};

use super::pb;
use crate::{
    app::{ResolveQuery, ResolveTarget},
    discovery::Snapshot,
    resolve::{Caller, Mode},
};

/// Response for ResolveAgent (`agentry.v1.ResolveAgentResponse`).
///
/// Decoded or built from its fields, it is an ordinary message. One made by the service from a
/// cached encoding has empty fields and sends those bytes.
#[derive(Clone, PartialEq, Default)]
pub struct ResolveAgentResponse {
    /// The definition as read.
    pub agent: Option<pb::Agent>,
    /// What a worker spawned by this caller would get.
    pub effective: Option<pb::EffectiveAgent>,
    /// Content hash of the winning definitions.
    pub registry_version: String,
    /// The whole message, already encoded; sent instead of the fields.
    encoded: Option<Bytes>,
}

impl ResolveAgentResponse {
    /// The message with these fields (the encoding is private, so there is no struct literal).
    pub fn new(
        agent: Option<pb::Agent>,
        effective: Option<pb::EffectiveAgent>,
        registry_version: String,
    ) -> Self {
        Self {
            agent,
            effective,
            registry_version,
            encoded: None,
        }
    }

    /// A reply that sends `bytes`, the encoding of a complete `ResolveAgentResponse`.
    pub(crate) fn from_encoded(bytes: Bytes) -> Self {
        Self {
            encoded: Some(bytes),
            ..Self::default()
        }
    }
}

impl std::fmt::Debug for ResolveAgentResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("ResolveAgentResponse");
        match &self.encoded {
            Some(bytes) => d.field("encoded_bytes", &bytes.len()).finish(),
            None => d
                .field("agent", &self.agent)
                .field("effective", &self.effective)
                .field("registry_version", &self.registry_version)
                .finish(),
        }
    }
}

/// Names the field a decoding error happened in, as generated code does.
fn in_field(field: &'static str) -> impl FnOnce(DecodeError) -> DecodeError {
    move |mut e| {
        e.push("ResolveAgentResponse", field);
        e
    }
}

impl Message for ResolveAgentResponse {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if let Some(bytes) = &self.encoded {
            buf.put_slice(bytes);
            return;
        }
        if let Some(agent) = &self.agent {
            message::encode(1, agent, buf);
        }
        if let Some(effective) = &self.effective {
            message::encode(2, effective, buf);
        }
        if !self.registry_version.is_empty() {
            string::encode(3, &self.registry_version, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        // A decoded message is made of its fields; a stale encoding must not shadow them.
        self.encoded = None;
        match tag {
            1 => message::merge(
                wire_type,
                self.agent.get_or_insert_with(Default::default),
                buf,
                ctx,
            )
            .map_err(in_field("agent")),
            2 => message::merge(
                wire_type,
                self.effective.get_or_insert_with(Default::default),
                buf,
                ctx,
            )
            .map_err(in_field("effective")),
            3 => string::merge(wire_type, &mut self.registry_version, buf, ctx)
                .map_err(in_field("registry_version")),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        if let Some(bytes) = &self.encoded {
            return bytes.len();
        }
        self.agent
            .as_ref()
            .map_or(0, |m| message::encoded_len(1, m))
            + self
                .effective
                .as_ref()
                .map_or(0, |m| message::encoded_len(2, m))
            + if self.registry_version.is_empty() {
                0
            } else {
                string::encoded_len(3, &self.registry_version)
            }
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// Most answers kept per agent name: one per workspace snapshot, mode and kind of caller in use.
const PER_NAME: usize = 16;

/// Most answers kept in all; past it, answers for snapshots no longer alive are dropped, then
/// everything if that was not enough.
const TOTAL: usize = 4096;

/// Answers larger than this are not kept: a coordinator's catalog over thousands of agents is
/// mostly transfer, and sixteen variants of it would hold a lot of memory.
const MAX_BYTES: usize = 256 * 1024;

/// One computed answer and what it was computed from.
struct Cached {
    /// The snapshot. A `Weak` keeps its allocation (not its contents), so while one is held no
    /// other snapshot can have its address: pointer equality is identity.
    snapshot: Weak<Snapshot>,
    mode: Mode,
    caller: Caller,
    request_schema: Option<serde_json::Value>,
    bytes: Bytes,
}

impl Cached {
    fn answers(&self, t: &ResolveTarget, q: &ResolveQuery) -> bool {
        std::ptr::eq(self.snapshot.as_ptr(), Arc::as_ptr(&t.snapshot))
            && self.mode == q.mode
            && self.caller == t.caller
            && self.request_schema == q.output_schema
    }
}

/// The encoded `ResolveAgent` answers computed so far (see the module docs), by agent name.
#[derive(Default)]
pub struct ResolveReplies {
    by_name: RwLock<HashMap<String, Vec<Cached>>>,
}

impl ResolveReplies {
    /// The encoded answer for this target and query, if it was computed before.
    pub fn get(&self, t: &ResolveTarget, q: &ResolveQuery) -> Option<Bytes> {
        let by_name = self.by_name.read().unwrap_or_else(|e| e.into_inner());
        by_name
            .get(&q.name)?
            .iter()
            .find(|c| c.answers(t, q))
            .map(|c| c.bytes.clone())
    }

    /// Keeps `bytes`, the encoded answer for this target and query, unless it is over 256 KiB.
    /// Runs only after a miss, so counting the answers here costs nothing on the hot path.
    pub fn put(&self, t: &ResolveTarget, q: &ResolveQuery, bytes: Bytes) {
        if bytes.len() > MAX_BYTES {
            return;
        }
        let mut by_name = self.by_name.write().unwrap_or_else(|e| e.into_inner());
        let before = count(&by_name);
        if before >= TOTAL {
            for list in by_name.values_mut() {
                list.retain(|c| c.snapshot.strong_count() > 0);
            }
            by_name.retain(|_, list| !list.is_empty());
            if count(&by_name) >= TOTAL {
                by_name.clear();
            }
            tracing::debug!(
                before,
                after = count(&by_name),
                "ResolveAgent answer cache swept"
            );
        }
        let list = by_name.entry(q.name.clone()).or_default();
        list.retain(|c| c.snapshot.strong_count() > 0 && !c.answers(t, q));
        if list.len() >= PER_NAME {
            list.remove(0);
        }
        list.push(Cached {
            snapshot: Arc::downgrade(&t.snapshot),
            mode: q.mode,
            caller: t.caller.clone(),
            request_schema: q.output_schema.clone(),
            bytes,
        });
    }
}

/// How many answers are kept.
fn count(by_name: &HashMap<String, Vec<Cached>>) -> usize {
    by_name.values().map(Vec::len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{config::Config, discovery::Registry};

    fn registry() -> (tempfile::TempDir, Registry) {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            home: Some(dir.path().to_owned()),
            ..Config::default()
        };
        let registry = Registry::new(&cfg, false).unwrap();
        (dir, registry)
    }

    fn target(snapshot: &Arc<Snapshot>, depth: u32) -> ResolveTarget {
        ResolveTarget {
            caller: Caller {
                depth,
                ..Caller::top_level()
            },
            agent: snapshot.get("task").unwrap().clone(),
            snapshot: snapshot.clone(),
        }
    }

    fn query() -> ResolveQuery {
        ResolveQuery {
            name: "task".into(),
            workspace: String::new(),
            mode: Mode::Default,
            output_schema: None,
        }
    }

    #[tokio::test]
    async fn an_answer_is_found_only_for_what_it_was_computed_from() {
        let (_dir, registry) = registry();
        let snap = registry.snapshot("").await.unwrap();
        let cache = ResolveReplies::default();
        let (t, q) = (target(&snap, 0), query());
        assert!(cache.get(&t, &q).is_none());
        cache.put(&t, &q, Bytes::from_static(b"top"));
        assert_eq!(cache.get(&t, &q).as_deref(), Some(&b"top"[..]));
        assert!(cache.get(&target(&snap, 1), &q).is_none(), "another depth");
        let plan = ResolveQuery {
            mode: Mode::Plan,
            ..query()
        };
        assert!(cache.get(&t, &plan).is_none(), "another mode");
        let schema = ResolveQuery {
            output_schema: Some(serde_json::json!({"type": "object"})),
            ..query()
        };
        assert!(cache.get(&t, &schema).is_none(), "a request schema");
        let other = ResolveQuery {
            name: "explore".into(),
            ..query()
        };
        assert!(cache.get(&t, &other).is_none(), "another name");

        // A rebuilt snapshot is another answer.
        let fresh = registry.reload("").await.unwrap();
        assert!(!Arc::ptr_eq(&snap, &fresh));
        assert!(cache.get(&target(&fresh, 0), &q).is_none());

        // The entry of a snapshot nobody holds any more goes when the next answer is kept.
        let (_other_dir, other) = self::registry();
        let gone = other.snapshot("").await.unwrap();
        cache.put(&target(&gone, 0), &q, Bytes::from_static(b"gone"));
        assert_eq!(count(&cache.by_name.read().unwrap()), 2);
        drop((gone, other));
        cache.put(&target(&fresh, 0), &q, Bytes::from_static(b"fresh"));
        assert_eq!(count(&cache.by_name.read().unwrap()), 2);
        assert_eq!(cache.get(&t, &q).as_deref(), Some(&b"top"[..]));
        assert_eq!(
            cache.get(&target(&fresh, 0), &q).as_deref(),
            Some(&b"fresh"[..])
        );
    }

    #[tokio::test]
    async fn a_huge_answer_is_not_kept() {
        let (_dir, registry) = registry();
        let snap = registry.snapshot("").await.unwrap();
        let cache = ResolveReplies::default();
        let (t, q) = (target(&snap, 0), query());
        cache.put(&t, &q, Bytes::from(vec![0; MAX_BYTES + 1]));
        assert!(cache.get(&t, &q).is_none());
        cache.put(&t, &q, Bytes::from(vec![0; MAX_BYTES]));
        assert_eq!(cache.get(&t, &q).map(|b| b.len()), Some(MAX_BYTES));
    }

    fn sample() -> ResolveAgentResponse {
        ResolveAgentResponse::new(
            Some(pb::Agent {
                name: "task".into(),
                description: "General work".into(),
                system_prompt: "You are a worker.".into(),
                tools: Some(pb::StringList {
                    values: vec!["read".into(), "grep".into()],
                }),
                ..Default::default()
            }),
            Some(pb::EffectiveAgent {
                name: "task".into(),
                system_prompt: "base\n\nYou are a worker.".into(),
                depth: 1,
                ..Default::default()
            }),
            "abc123".into(),
        )
    }

    #[test]
    fn an_encoded_reply_sends_exactly_the_bytes_of_its_fields() {
        let fields = sample();
        let bytes = Bytes::from(fields.encode_to_vec());
        let cached = ResolveAgentResponse::from_encoded(bytes.clone());
        assert_eq!(cached.encoded_len(), fields.encoded_len());
        assert_eq!(cached.encode_to_vec(), bytes.to_vec());
        // What a client decodes from it is the message with its fields.
        let decoded = ResolveAgentResponse::decode(bytes).unwrap();
        assert_eq!(decoded, fields);
        assert!(decoded.encoded.is_none());
    }

    #[test]
    fn it_reads_what_the_generated_code_would_and_skips_unknown_fields() {
        let mut bytes = sample().encode_to_vec();
        // Field 9, varint 1: a field a newer server might add.
        bytes.extend_from_slice(&[0x48, 0x01]);
        assert_eq!(ResolveAgentResponse::decode(&bytes[..]).unwrap(), sample());
        // Field 1 declared length-delimited but cut short names the field.
        let err = ResolveAgentResponse::decode(&[0x0a, 0x05, 0x0a][..]).unwrap_err();
        assert!(
            err.to_string().contains("ResolveAgentResponse.agent"),
            "{err}"
        );
    }
}
