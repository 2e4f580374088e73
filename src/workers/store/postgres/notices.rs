//! Notices between replicas: one dedicated `LISTEN` connection per process that turns the
//! notifications of `agentry_events`, `agentry_stop`, `agentry_holds`, `agentry_relays` and
//! (while a runner is connected here) `agentry_runner_waits` into [`Notice`]s and
//! [`RunnerNotice`]s, reconnecting forever (with a resync after each connect), and the parsing
//! of their payloads.
//! Notices are hints: anything malformed is dropped.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::{Notify, broadcast, watch};
use tokio_postgres::{AsyncMessage, NoTls};

use super::follows::FOLLOWS_CHANNEL;
use crate::workers::model::WorkerId;
use crate::workers::store::{Notice, Relayed, RunnerNotice, RunnerWait};

/// Pause between two attempts of the listener to reconnect.
const LISTEN_RETRY: Duration = Duration::from_millis(500);

/// PostgreSQL takes a notification's payload only when it is shorter than this (in bytes);
/// every statement that notifies keeps to it, or carries less and says so.
pub(super) const PAYLOAD_LIMIT: usize = 8000;

/// Notices buffered per receiver; one that lags re-reads (it gets `Lagged`, then resyncs).
pub(super) const NOTICE_BUFFER: usize = 1024;

/// Where the listener sends what it reads.
pub(super) struct Senders {
    /// Events, stops, holds.
    pub notices: broadcast::Sender<Notice>,
    /// Runner waits and the relays to this replica.
    pub runners: broadcast::Sender<RunnerNotice>,
    /// Wakes the task that keeps who follows events (`follows`): on a notice on its channel,
    /// and on each connect.
    pub follows: Arc<Notify>,
}

impl Senders {
    /// Sends what a notification on `channel` says to its receivers: runner waits, and relays
    /// addressed to `me`, to the fleet's; a resync to every receiver; events, stops and holds
    /// to the others.
    fn hear(&self, channel: &str, payload: &str, me: &str) {
        match channel {
            WAITS_CHANNEL => {
                for notice in parse_waits(payload) {
                    let _ = self.runners.send(notice);
                }
            }
            RELAYS_CHANNEL => {
                if let Some((to, relayed)) = parse_relay(payload)
                    && to == me
                {
                    let _ = self.runners.send(RunnerNotice::Relay { relayed });
                }
            }
            _ => {
                for notice in parse_notices(channel, payload, me) {
                    match notice {
                        Notice::Resync => self.resync(),
                        notice => drop(self.notices.send(notice)),
                    }
                }
            }
        }
    }

    /// Tells every receiver to re-read what it may have missed.
    fn resync(&self) {
        self.follows.notify_one();
        let _ = self.notices.send(Notice::Resync);
        let _ = self.runners.send(RunnerNotice::Resync);
    }
}

/// The channel of published runner waits, listened on only while `waits` says so
/// ([`SharedStore::listen_for_waits`](crate::workers::store::SharedStore::listen_for_waits)).
pub(super) const WAITS_CHANNEL: &str = "agentry_runner_waits";

/// The channel of messages relayed between replicas about runner workers.
pub(super) const RELAYS_CHANNEL: &str = "agentry_relays";

/// The `LISTEN` of every channel a replica listens on, [`WAITS_CHANNEL`] aside.
static CHANNELS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "LISTEN agentry_events; LISTEN agentry_stop; LISTEN agentry_holds; \
         LISTEN {RELAYS_CHANNEL}; LISTEN {FOLLOWS_CHANNEL}"
    )
});

/// The listener: one dedicated connection that `LISTEN`s on the channels, turning
/// notifications into notices for `senders`; reconnects forever, sending a resync after each
/// connect so receivers re-read what they may have missed. It listens for published runner
/// waits only while `waits` is true, and when that turns true it sends a
/// [`RunnerNotice::Wait`]`(None)` once the `LISTEN` took effect (read the waits).
pub(super) async fn listen(
    config: tokio_postgres::Config,
    this_replica: String,
    senders: Senders,
    mut waits: watch::Receiver<bool>,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let senders = Arc::new(senders);
    let mut ready = Some(ready);
    loop {
        match config.connect(NoTls).await {
            Ok((client, mut connection)) => {
                // The connection must be polled for LISTEN to complete and for messages; each
                // notification is parsed and sent on where it is read (no copy, no other task).
                let (to, me) = (senders.clone(), this_replica.clone());
                let mut pump = tokio::spawn(async move {
                    while let Some(message) =
                        std::future::poll_fn(|cx| connection.poll_message(cx)).await
                    {
                        match message {
                            // Another replica's flag changed (its own payload is its id;
                            // this replica's own change needs no read).
                            Ok(AsyncMessage::Notification(n)) if n.channel() == FOLLOWS_CHANNEL => {
                                if n.payload() != me {
                                    to.follows.notify_one();
                                }
                            }
                            Ok(AsyncMessage::Notification(n)) => {
                                to.hear(n.channel(), n.payload(), &me);
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "store listener connection failed");
                                break;
                            }
                        }
                    }
                });
                let with_waits = *waits.borrow_and_update();
                let channels = if with_waits {
                    format!("{}; LISTEN {WAITS_CHANNEL}", *CHANNELS)
                } else {
                    CHANNELS.clone()
                };
                if let Err(e) = client.batch_execute(&channels).await {
                    tracing::warn!(error = %e, "store listener cannot LISTEN");
                    pump.abort();
                } else {
                    // Whatever was committed before LISTEN took effect is re-read.
                    senders.resync();
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                    // Until the connection ends.
                    follow_waits(&client, &mut pump, &mut waits, &senders).await;
                    tracing::warn!("store listener disconnected; reconnecting");
                }
                drop(client);
            }
            Err(e) => tracing::debug!(error = %e, "store listener cannot connect"),
        }
        tokio::time::sleep(LISTEN_RETRY).await;
    }
}

/// While the listener's connection lasts (`pump` runs), listens for runner waits or stops
/// as `waits` changes; after a `LISTEN`, the fleet is told to read the waits published while
/// this replica did not hear of them.
async fn follow_waits(
    client: &tokio_postgres::Client,
    pump: &mut tokio::task::JoinHandle<()>,
    waits: &mut watch::Receiver<bool>,
    senders: &Senders,
) {
    loop {
        tokio::select! {
            _ = &mut *pump => return,
            changed = waits.changed() => {
                if changed.is_err() {
                    // The store is going: only the connection is left to follow.
                    let _ = (&mut *pump).await;
                    return;
                }
                let on = *waits.borrow_and_update();
                let statement = if on { "LISTEN" } else { "UNLISTEN" };
                if let Err(e) = client
                    .batch_execute(&format!("{statement} {WAITS_CHANNEL}"))
                    .await
                {
                    tracing::warn!(error = %e, "store listener cannot {statement} runner waits");
                    pump.abort();
                    return;
                }
                if on {
                    let _ = senders.runners.send(RunnerNotice::Wait(None));
                }
            }
        }
    }
}

/// The [`Notice`]s of one notification on `agentry_events`, `agentry_stop` or
/// `agentry_holds`: on `agentry_events`, a batch's notification names every event it wrote,
/// joined by `,`; on the other channels it is one notice. Anything malformed is dropped (only
/// a hint), each event on its own.
fn parse_notices(channel: &str, payload: &str, this_replica: &str) -> Vec<Notice> {
    if channel == "agentry_events" {
        payload
            .split(',')
            .filter_map(|one| parse_notice(channel, one, this_replica))
            .collect()
    } else {
        parse_notice(channel, payload, this_replica)
            .into_iter()
            .collect()
    }
}

/// A notification payload of `agentry_events`, `agentry_stop` or `agentry_holds` as a
/// [`Notice`]; anything malformed, or on another channel, is dropped (only a hint).
fn parse_notice(channel: &str, payload: &str, this_replica: &str) -> Option<Notice> {
    match channel {
        "agentry_events" => {
            // `worker:sequence:replica`; a replica of an earlier build sends no replica.
            let mut parts = payload.splitn(3, ':');
            let worker = parts.next()?;
            // `*:replica`: a replica learned that events are followed; what it committed
            // before was not announced (`follows`).
            if worker == "*" {
                return Some(Notice::Resync);
            }
            let worker_id = WorkerId::parse(worker).ok()?;
            let sequence = parts.next()?.parse().ok()?;
            Some(Notice::Event {
                worker_id,
                sequence,
                by_this_replica: parts.next() == Some(this_replica),
            })
        }
        "agentry_stop" => Some(Notice::Stop {
            worker_id: WorkerId::parse(payload).ok()?,
        }),
        "agentry_holds" => Some(Notice::Holds {
            worker_id: WorkerId::parse(payload).ok()?,
        }),
        _ => None,
    }
}

/// An `agentry_relays` notice as its addressee's replica id and the messages it carried:
/// `[to, [[seq, worker, message], …]]` with the messages of one statement, `[to, worker,
/// [[seq, message], …]]` (a replica of an earlier build), or `[to]` (too large to carry, then
/// `None`: they are taken from the table). Without an addressee it is dropped; a carried
/// message about an unreadable worker id makes it `[to]`.
fn parse_relay(payload: &str) -> Option<(String, Option<Vec<Relayed>>)> {
    type Batch = (String, Vec<(i64, String, String)>);
    type One = (String, String, Vec<(i64, String)>);
    let carried = |to_replica: String, relayed: Option<Vec<Relayed>>| Some((to_replica, relayed));
    if let Ok((to_replica, messages)) = serde_json::from_str::<Batch>(payload) {
        let relayed = messages
            .into_iter()
            .map(|(seq, worker, message)| {
                Some(Relayed {
                    seq,
                    worker_id: WorkerId::parse(&worker).ok()?,
                    message,
                })
            })
            .collect();
        return carried(to_replica, relayed);
    }
    if let Ok((to_replica, worker, messages)) = serde_json::from_str::<One>(payload) {
        let relayed = WorkerId::parse(&worker).ok().map(|worker_id| {
            messages
                .into_iter()
                .map(|(seq, message)| Relayed {
                    seq,
                    worker_id: worker_id.clone(),
                    message,
                })
                .collect()
        });
        return carried(to_replica, relayed);
    }
    let (to_replica,): (String,) = serde_json::from_str(payload).ok()?;
    carried(to_replica, None)
}

/// A published wait as a notice carries it: `[worker, owner, agent, principal, deadline_ms]`.
type WaitJson = (String, String, String, String, i64);

fn wait_of((worker_id, owner, agent, caller_scope, deadline_ms): WaitJson) -> Option<RunnerWait> {
    Some(RunnerWait {
        worker_id: WorkerId::parse(&worker_id).ok()?,
        owner,
        agent,
        caller_scope,
        deadline_ms,
    })
}

/// The waits an `agentry_runner_waits` notice carries: a statement's list of them (`[[worker,
/// owner, agent, principal, deadline_ms], …]`), or one wait alone (a replica of an earlier
/// build). Anything else — `[]` (too many to carry), a malformed wait — is one `Wait(None)`:
/// read the waits.
fn parse_waits(payload: &str) -> Vec<RunnerNotice> {
    let carried: Option<Vec<RunnerWait>> = match serde_json::from_str::<Vec<WaitJson>>(payload) {
        Ok(list) => list.into_iter().map(wait_of).collect(),
        Err(_) => serde_json::from_str::<WaitJson>(payload)
            .ok()
            .and_then(wait_of)
            .map(|w| vec![w]),
    };
    match carried {
        Some(waits) if !waits.is_empty() => waits
            .into_iter()
            .map(|w| RunnerNotice::Wait(Some(w)))
            .collect(),
        _ => vec![RunnerNotice::Wait(None)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_parse_and_bad_payloads_are_dropped() {
        let parse = |channel: &str, payload: &str| parse_notice(channel, payload, "r-me");
        let id = WorkerId::generate();
        // Whose commit it was: this replica's, another's, or (an earlier build) not said.
        for (payload, by_this_replica) in [
            (format!("{id}:7:r-me"), true),
            (format!("{id}:7:r-other"), false),
            (format!("{id}:7"), false),
        ] {
            assert_eq!(
                parse("agentry_events", &payload),
                Some(Notice::Event {
                    worker_id: id.clone(),
                    sequence: 7,
                    by_this_replica,
                }),
                "{payload}"
            );
        }
        assert_eq!(
            parse("agentry_stop", id.as_str()),
            Some(Notice::Stop {
                worker_id: id.clone()
            })
        );
        let wait = RunnerWait {
            worker_id: id.clone(),
            owner: "r-1".into(),
            agent: "reviewer".into(),
            caller_scope: "team:a".into(),
            deadline_ms: 1_700_000_000_000,
        };
        // One wait alone (a replica of an earlier build), or a statement's list of them.
        let waits = parse_waits;
        assert_eq!(
            waits(&format!(
                r#"["{id}", "r-1", "reviewer", "team:a", 1700000000000]"#
            )),
            vec![RunnerNotice::Wait(Some(wait.clone()))]
        );
        let other = RunnerWait {
            worker_id: WorkerId::generate(),
            ..wait.clone()
        };
        assert_eq!(
            waits(&format!(
                "[[\"{id}\", \"r-1\", \"reviewer\", \"team:a\", 1700000000000], \n \
                 [\"{}\", \"r-1\", \"reviewer\", \"team:a\", 1700000000000]]",
                other.worker_id
            )),
            vec![
                RunnerNotice::Wait(Some(wait.clone())),
                RunnerNotice::Wait(Some(other))
            ]
        );
        // A wait notice that does not carry its waits whole still says "look", once.
        for payload in [
            "",
            "[]",
            "[1, 2]",
            r#"["not-an-id", "r", "a", "s", 1]"#,
            &format!(r#"[["{id}", "r-1", "reviewer", "team:a", 1], ["bad", "r", "a", "s", 1]]"#),
        ] {
            assert_eq!(waits(payload), vec![RunnerNotice::Wait(None)], "{payload}");
        }
        // A relay notice to `r-2`, carrying `messages` (seq, worker, text) or not.
        let relay = |messages: Option<&[(i64, &WorkerId, &str)]>| {
            let relayed = messages.map(|ms| {
                ms.iter()
                    .map(|&(seq, worker, text)| Relayed {
                        seq,
                        worker_id: worker.clone(),
                        message: text.into(),
                    })
                    .collect()
            });
            Some(("r-2".to_owned(), relayed))
        };
        assert_eq!(parse_relay(r#"["r-2"]"#), relay(None));
        let carried = format!(r#"["r-2", "{id}", [[7, "{{\"kind\":\"accepted\"}}"], [8, "x"]]]"#);
        assert_eq!(
            parse_relay(&carried),
            relay(Some(&[(7, &id, r#"{"kind":"accepted"}"#), (8, &id, "x")]))
        );
        // One statement's relays to a replica (one notice, several workers); one unreadable
        // worker id and the notice only says "take them".
        let second = WorkerId::generate();
        assert_eq!(
            parse_relay(&format!(
                r#"["r-2", [[7, "{id}", "a"], [9, "{second}", "b"]]]"#
            )),
            relay(Some(&[(7, &id, "a"), (9, &second, "b")]))
        );
        assert_eq!(
            parse_relay(&format!(
                r#"["r-2", [[7, "{id}", "a"], [9, "not-an-id", "b"]]]"#
            )),
            relay(None)
        );
        for payload in ["", "[]", "[1]"] {
            assert_eq!(parse_relay(payload), None, "{payload}");
        }
        // A batch's notification: every event it names, a malformed one dropped alone.
        let other = WorkerId::generate();
        assert_eq!(
            parse_notices(
                "agentry_events",
                &format!("{id}:2:r-me,{other}:3:r-me,junk,{other}:x:r-me"),
                "r-me"
            ),
            vec![
                Notice::Event {
                    worker_id: id.clone(),
                    sequence: 2,
                    by_this_replica: true,
                },
                Notice::Event {
                    worker_id: other.clone(),
                    sequence: 3,
                    by_this_replica: true,
                },
            ]
        );
        // Other channels are not split.
        assert_eq!(
            parse_notices("agentry_stop", &format!("{id},{other}"), "r-me"),
            vec![]
        );
        for (channel, payload) in [
            ("agentry_events", "nonsense"),
            ("agentry_events", "w:x"),
            ("agentry_events", "w-1:7:r-me"),
            ("agentry_stop", ""),
            ("agentry_relays", r#"["r-me"]"#),
            ("other", "x"),
        ] {
            assert_eq!(parse(channel, payload), None, "{channel} {payload}");
        }
    }
}
