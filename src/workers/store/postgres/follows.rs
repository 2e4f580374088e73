//! Who follows events (docs/replicas.md, "Watching"). A replica announces the creates and
//! transitions it commits (`NOTIFY agentry_events`) only while another live replica follows
//! events: has a caller watching or waiting for a worker it may not run, or a console stream.
//! Every notification wakes every listening connection of the database, so announcing what no
//! one follows cost each commit one wake-up per replica of the fleet.
//!
//! Each replica says whether it follows in its `replicas` row (`follows_events`, written as
//! its followers here come and go, the last one's end [`LINGER`]ing), and announces a change on
//! `agentry_follows`. Each replica keeps whether another follows
//! ([`Origin::followed`](super::batch::Origin::followed), read in the same statement that
//! writes its own flag: on such a notice from another replica, on every listener connect and
//! every `lease / 3`); when that turns true it sends `NOTIFY agentry_events '*:<replica>'`,
//! which every receiver takes as a resync: what it committed before it knew was not announced.
//! Until its first read, and whenever a read fails, a replica announces everything.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::context::PgContext;
use crate::workers::store::StoreError;

/// The channel on which a replica says that its `follows_events` changed.
pub(super) const FOLLOWS_CHANNEL: &str = "agentry_follows";

/// How long a replica still follows after its last follower ended: callers that wait for other
/// replicas' workers now and then do not turn it on and off for each.
const LINGER: Duration = Duration::from_secs(10);

/// Pause after a failed read or write, before the next attempt.
const RETRY: Duration = Duration::from_millis(500);

/// Keeps this replica's `follows_events` as `wanted` says (followers here: more than none) and
/// `followed` as the other live replicas' rows say, until `wanted`'s sender is dropped (the
/// store is gone). `heard` wakes it for a read: a notice on [`FOLLOWS_CHANNEL`], or a listener
/// connect. It reads again at least every `every`.
pub(super) async fn run(
    pool: Pool,
    me: String,
    mut wanted: watch::Receiver<usize>,
    heard: Arc<Notify>,
    followed: Arc<AtomicBool>,
    every: Duration,
) {
    // What the database holds for this replica (`None`: not known, write it).
    let mut written: Option<bool> = None;
    // Whether this replica follows: while it has followers, and until `off_at` after that.
    let mut follows = false;
    let mut off_at: Option<Instant> = None;
    let mut read = true;
    let mut next_read = Instant::now() + every;
    loop {
        // The store is gone (its sender dropped).
        if wanted.has_changed().is_err() {
            return;
        }
        if *wanted.borrow_and_update() > 0 {
            follows = true;
            off_at = None;
        } else if follows {
            let at = *off_at.get_or_insert_with(|| Instant::now() + LINGER);
            if Instant::now() >= at {
                follows = false;
                off_at = None;
            }
        }
        if read || written != Some(follows) {
            let was = followed.load(Ordering::Acquire);
            match exchange(&pool, &me, follows, was).await {
                Ok(now) => {
                    (written, read) = (Some(follows), false);
                    next_read = Instant::now() + every;
                    followed.store(now, Ordering::Release);
                    if now && !was {
                        tracing::info!("another replica follows events: announcing this one's");
                    } else if was && !now {
                        tracing::info!(
                            "no other replica follows events: not announcing this one's"
                        );
                    }
                }
                Err(e) => {
                    // Unknown: announce everything until an exchange succeeds.
                    followed.store(true, Ordering::Release);
                    tracing::warn!(error = %e, "cannot exchange with the other replicas whether they follow events");
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            }
        }
        let lingering = async {
            match off_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = wanted.changed() => if changed.is_err() { return },
            () = heard.notified() => read = true,
            // The exchange also writes the flag again, should the row have changed meanwhile
            // (a lapsed lease).
            () = tokio::time::sleep_until(next_read) => read = true,
            () = lingering => {}
        }
    }
}

/// In one statement: records whether this replica `follows` events (saying so on
/// [`FOLLOWS_CHANNEL`] when that changed), and reads whether another live replica does; when
/// one does and this replica did not know it (`was`), tells every replica to read again what
/// it follows (a resync on `agentry_events`): what this one committed before was not announced.
async fn exchange(pool: &Pool, me: &str, follows: bool, was: bool) -> Result<bool, StoreError> {
    let client = pool.get().await.pg("follow events: get a connection")?;
    let row = client
        .query_one(
            "WITH u AS (
                 UPDATE replicas SET follows_events = $2
                  WHERE id = $1 AND follows_events <> $2
                 RETURNING pg_notify('agentry_follows', $1::text)
             ), f AS (
                 SELECT EXISTS (SELECT 1 FROM replicas
                                 WHERE follows_events AND id <> $1 AND expires_at > now())
                        AS others
             )
             SELECT others,
                    CASE WHEN others AND NOT $3::boolean
                         THEN pg_notify('agentry_events', '*:' || $1::text) END
               FROM f",
            &[&me, &follows, &was],
        )
        .await
        .pg("exchange whether replicas follow events")?;
    Ok(row.get(0))
}
