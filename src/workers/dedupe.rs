//! Dedupe of identical dispatches (docs §6.7): two identical spawns within the TTL run once.
//!
//! This module owns the key (who asked, under which parent, for which agent, with which prompt
//! up to whitespace) and the bounded, expiring map from key to the worker that serves it, with
//! an atomic per-key claim so that concurrent identical spawns start one worker. It must not
//! depend on the worker store, the executors or `tonic`: whether a cached worker may be reused
//! is asked of the caller through a closure.

use std::fmt;
use std::time::{Duration, Instant};

use moka::ops::compute::{CompResult, Op};
use moka::sync::Cache;
use sha2::{Digest, Sha256};

/// `prompt` with every run of Unicode whitespace collapsed to one ASCII space and both ends
/// trimmed, so prompts that differ only in layout (tabs, CRLF, NBSP, trailing newline) dedupe.
pub fn canonical_prompt(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for word in p.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// What makes two dispatches the same (docs §6.7): who asked, under which parent, for which
/// agent, in which mode and workspace, with which effective output schema and prompt. Mode,
/// workspace and schema belong here because they change what the worker may do: a plan-mode
/// dispatch must never be answered by a default-mode worker that has every tool.
#[derive(Debug, Clone, Copy)]
pub struct Dispatch<'a> {
    /// The authenticated principal, or `anonymous`.
    pub caller_scope: &'a str,
    /// The calling worker's id, `""` for a top-level caller.
    pub parent_worker_id: &'a str,
    /// The agent asked for.
    pub agent: &'a str,
    /// The mode's name (`default`, `plan`).
    pub mode: &'a str,
    /// The workspace, `""` for none.
    pub workspace: &'a str,
    /// The effective output schema the worker would get.
    pub output_schema: Option<&'a serde_json::Value>,
    /// The raw prompt; canonicalised by [`DedupeKey::new`].
    pub prompt: &'a str,
}

/// The identity of a dispatch for dedupe: a SHA-256 over every field of a [`Dispatch`], the
/// prompt in its whitespace-canonical form.
///
/// Each field is hashed with its length (u64, little endian) in front, so moving bytes across a
/// field boundary (`("ab", "c")` vs `("a", "bc")`) always changes the key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DedupeKey([u8; 32]);

impl DedupeKey {
    /// The key of `d`.
    pub fn new(d: &Dispatch<'_>) -> Self {
        let canonical = canonical_prompt(d.prompt);
        // Absent and `null` differ from every schema text, and from each other only in name.
        let schema = d
            .output_schema
            .map_or_else(|| "-".to_owned(), serde_json::Value::to_string);
        let mut hasher = Sha256::new();
        for field in [
            d.caller_scope,
            d.parent_worker_id,
            d.agent,
            d.mode,
            d.workspace,
            schema.as_str(),
            canonical.as_str(),
        ] {
            hasher.update((field.len() as u64).to_le_bytes());
            hasher.update(field.as_bytes());
        }
        Self(hasher.finalize().into())
    }

    /// The raw digest, e.g. to persist alongside the worker for audit.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for DedupeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for DedupeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DedupeKey({self})")
    }
}

/// What the cache remembers about a key: which worker serves it and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupeEntry {
    /// The worker that a later identical dispatch is pointed at.
    pub worker_id: String,
    /// When that worker claimed the key, for the `age` in the caller's hint.
    pub inserted: Instant,
}

/// The answer to [`DedupeCache::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The new worker id is now cached for the key: the caller creates and runs that worker.
    Fresh,
    /// An earlier worker serves this key and may be reused: the caller returns it with
    /// `deduplicated = true` and must not start anything.
    Existing {
        /// The worker to return (and, with `wait = true`, to wait for).
        worker_id: String,
        /// How long ago it claimed the key, for the hint ("already dispatched 12 s ago").
        age: Duration,
    },
}

/// Which worker serves each recent dispatch key: a bounded moka cache whose entries live
/// `ttl` after they are written (docs §6.7: `dedupe.ttl`, `dedupe.max_entries`).
///
/// Lives in memory only: after a restart every dispatch is fresh, which is the safe direction.
#[derive(Clone)]
pub struct DedupeCache {
    /// Key → the worker serving it. Time-to-live, not time-to-idle: repeated hits do not keep
    /// an old result alive past the TTL.
    entries: Cache<DedupeKey, DedupeEntry>,
}

impl fmt::Debug for DedupeCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DedupeCache")
            .field("entries", &self.entries.entry_count())
            .finish()
    }
}

impl DedupeCache {
    /// A cache whose entries expire `ttl` after they are written, holding at most
    /// `max_entries` keys (beyond that moka evicts by its usual frequency/recency policy).
    pub fn new(ttl: Duration, max_entries: u64) -> Self {
        Self {
            entries: Cache::builder()
                .max_capacity(max_entries)
                .time_to_live(ttl)
                .build(),
        }
    }

    /// Decides, atomically for `key`, whether a dispatch starts `new_worker_id` or reuses an
    /// earlier worker.
    ///
    /// With no live entry, `new_worker_id` is stored and the answer is [`Claim::Fresh`]. With an
    /// entry, `reusable(existing_id)` is asked: `true` (pending, running or completed) answers
    /// [`Claim::Existing`]; `false` (it ended failed or killed) replaces it with
    /// `new_worker_id` and answers [`Claim::Fresh`], so the retry runs. Concurrent claims on
    /// one key are serialised, so exactly one of N identical concurrent dispatches is fresh.
    ///
    /// `reusable` runs under the key's lock: it must be quick and must not touch this cache.
    pub fn claim(
        &self,
        key: DedupeKey,
        new_worker_id: &str,
        reusable: impl FnOnce(&str) -> bool,
    ) -> Claim {
        let result = self
            .entries
            .entry(key)
            .and_compute_with(|existing| match existing {
                Some(entry) if reusable(&entry.value().worker_id) => Op::Nop,
                _ => Op::Put(DedupeEntry {
                    worker_id: new_worker_id.to_owned(),
                    inserted: Instant::now(),
                }),
            });
        match result {
            CompResult::Unchanged(entry) => {
                let entry = entry.into_value();
                Claim::Existing {
                    age: entry.inserted.elapsed(),
                    worker_id: entry.worker_id,
                }
            }
            CompResult::Inserted(_)
            | CompResult::ReplacedWith(_)
            | CompResult::StillNone(_)
            | CompResult::Removed(_) => Claim::Fresh,
        }
    }

    /// Drops `key` if it still points at `worker_id` — for a fresh claim whose worker could not
    /// even be created, so the next identical dispatch is not sent to a worker that does not
    /// exist. A key already re-claimed by another worker is left alone.
    pub fn forget(&self, key: DedupeKey, worker_id: &str) {
        self.entries
            .entry(key)
            .and_compute_with(|existing| match existing {
                Some(entry) if entry.value().worker_id == worker_id => Op::Remove,
                _ => Op::Nop,
            });
    }

    /// The worker currently serving `key`, if its entry has not expired.
    pub fn get(&self, key: &DedupeKey) -> Option<DedupeEntry> {
        self.entries.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::{Arc, Barrier};

    fn cache() -> DedupeCache {
        DedupeCache::new(Duration::from_secs(120), 1000)
    }

    fn dispatch<'a>(
        scope: &'a str,
        parent: &'a str,
        agent: &'a str,
        prompt: &'a str,
    ) -> Dispatch<'a> {
        Dispatch {
            caller_scope: scope,
            parent_worker_id: parent,
            agent,
            mode: "default",
            workspace: "",
            output_schema: None,
            prompt,
        }
    }

    fn key_of(scope: &str, parent: &str, agent: &str, prompt: &str) -> DedupeKey {
        DedupeKey::new(&dispatch(scope, parent, agent, prompt))
    }

    #[test]
    fn canonical_prompt_collapses_all_unicode_whitespace() {
        let cases = [
            ("fix  the\tbug", "fix the bug"),
            ("  leading and trailing \n", "leading and trailing"),
            ("line one\r\nline two\n\n\nthree", "line one line two three"),
            (
                "non\u{00A0}breaking\u{2003}em\u{3000}ideographic",
                "non breaking em ideographic",
            ),
            ("\t\n \u{00A0}", ""),
            ("", ""),
            ("already canonical", "already canonical"),
        ];
        for (raw, want) in cases {
            assert_eq!(canonical_prompt(raw), want, "{raw:?}");
        }
    }

    #[test]
    fn key_is_equal_for_whitespace_equivalent_prompts() {
        assert_eq!(
            key_of("alice", "", "reviewer", "review\n\tsrc/lib.rs  "),
            key_of("alice", "", "reviewer", "review src/lib.rs"),
        );
    }

    #[test]
    fn key_differs_by_every_field() {
        let base = key_of("alice", "w-1", "reviewer", "review it");
        assert_ne!(base, key_of("bob", "w-1", "reviewer", "review it"));
        assert_ne!(base, key_of("alice", "w-2", "reviewer", "review it"));
        assert_ne!(base, key_of("alice", "", "reviewer", "review it"));
        assert_ne!(base, key_of("alice", "w-1", "planner", "review it"));
        assert_ne!(base, key_of("alice", "w-1", "reviewer", "review that"));
        let d = dispatch("alice", "w-1", "reviewer", "review it");
        let schema = serde_json::json!({"type": "object"});
        for other in [
            Dispatch { mode: "plan", ..d },
            Dispatch {
                workspace: "/srv/a",
                ..d
            },
            Dispatch {
                output_schema: Some(&schema),
                ..d
            },
            Dispatch {
                output_schema: Some(&serde_json::Value::Null),
                ..d
            },
        ] {
            assert_ne!(base, DedupeKey::new(&other), "{other:?}");
        }
    }

    #[test]
    fn field_boundaries_cannot_be_forged() {
        assert_ne!(key_of("ab", "", "c", "p"), key_of("a", "", "bc", "p"),);
        assert_ne!(
            key_of("alice", "", "reviewer", "x"),
            key_of("alice", "reviewer", "", "x"),
        );
    }

    #[test]
    fn key_displays_as_hex() {
        let key = key_of("anonymous", "", "a", "p");
        assert_eq!(key.to_string().len(), 64);
        assert_eq!(hex::decode(key.to_string()).unwrap(), key.as_bytes());
    }

    #[test]
    fn first_claim_is_fresh_then_reused() {
        let cache = cache();
        let key = key_of("anonymous", "", "a", "p");
        assert_eq!(cache.claim(key, "w-1", |_| true), Claim::Fresh);
        let Claim::Existing { worker_id, age } = cache.claim(key, "w-2", |_| true) else {
            panic!("expected a hit");
        };
        assert_eq!(worker_id, "w-1");
        assert!(age < Duration::from_secs(5));
    }

    #[test]
    fn a_failed_or_killed_worker_is_replaced() {
        let cache = cache();
        let key = key_of("anonymous", "", "a", "p");
        assert_eq!(cache.claim(key, "w-1", |_| true), Claim::Fresh);
        let mut asked = None;
        let claim = cache.claim(key, "w-2", |id| {
            asked = Some(id.to_owned());
            false
        });
        assert_eq!(claim, Claim::Fresh);
        assert_eq!(asked.as_deref(), Some("w-1"));
        assert_eq!(cache.get(&key).unwrap().worker_id, "w-2");
        assert!(matches!(
            cache.claim(key, "w-3", |_| true),
            Claim::Existing { worker_id, .. } if worker_id == "w-2"
        ));
    }

    #[test]
    fn forget_removes_only_the_named_worker() {
        let cache = cache();
        let key = key_of("anonymous", "", "a", "p");
        assert_eq!(cache.claim(key, "w-1", |_| true), Claim::Fresh);
        cache.forget(key, "w-other");
        assert_eq!(cache.get(&key).unwrap().worker_id, "w-1");
        cache.forget(key, "w-1");
        assert_eq!(cache.get(&key), None);
        assert_eq!(cache.claim(key, "w-2", |_| true), Claim::Fresh);
    }

    #[test]
    fn entries_expire_after_the_ttl() {
        let cache = DedupeCache::new(Duration::from_millis(200), 1000);
        let key = key_of("anonymous", "", "a", "p");
        assert_eq!(cache.claim(key, "w-1", |_| true), Claim::Fresh);
        assert!(matches!(
            cache.claim(key, "w-2", |_| true),
            Claim::Existing { .. }
        ));
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(cache.get(&key), None);
        assert_eq!(cache.claim(key, "w-3", |_| true), Claim::Fresh);
        assert_eq!(cache.get(&key).unwrap().worker_id, "w-3");
    }

    #[test]
    fn concurrent_identical_claims_start_exactly_one_worker() {
        const THREADS: usize = 16;
        for round in 0..20 {
            let cache = cache();
            let key = key_of("anonymous", "", "a", &format!("p{round}"));
            let barrier = Arc::new(Barrier::new(THREADS));
            let claims: Vec<Claim> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..THREADS)
                    .map(|i| {
                        let cache = &cache;
                        let barrier = Arc::clone(&barrier);
                        s.spawn(move || {
                            barrier.wait();
                            cache.claim(key, &format!("w-{i}"), |_| true)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let fresh = claims.iter().filter(|c| **c == Claim::Fresh).count();
            assert_eq!(fresh, 1, "round {round}: {claims:?}");
            let winner = cache.get(&key).unwrap().worker_id;
            for claim in &claims {
                if let Claim::Existing { worker_id, .. } = claim {
                    assert_eq!(*worker_id, winner);
                }
            }
        }
    }
}
