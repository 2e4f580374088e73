//! The PostgreSQL backend's tests: the suite every backend runs, and what only a store shared
//! by several replicas has — orphans of a lost replica closed exactly once, stop requests,
//! notices, dedupe claims across replicas, migrations, and the URL shown without its password.

use std::collections::HashSet;
use std::sync::Arc;

use super::schema::{self, MIGRATIONS};
use super::*;
use crate::workers::model::WorkerState;
use crate::workers::store::suite::{self, create, moved};
use crate::workers::store::testdb::TestDb;

fn replica(name: &str, lease_ms: u64) -> ReplicaSettings {
    ReplicaSettings {
        name: name.to_owned(),
        lease: Duration::from_millis(lease_ms),
        commit_window: Duration::from_millis(2),
    }
}

async fn open(db: &TestDb, name: &str) -> PostgresStore {
    PostgresStore::open(&db.url, replica(name, 60_000))
        .await
        .unwrap()
}

suite::store_suite!(async {
    let db = TestDb::create().await?;
    let store = open(&db, "suite").await;
    Some((db, Arc::new(store) as Arc<dyn WorkerStore>))
});

/// Ends `store`'s lease now, on the database clock, as if its process had died.
async fn expire(store: &PostgresStore) {
    store
        .client()
        .await
        .unwrap()
        .execute(
            "UPDATE replicas SET expires_at = now() - interval '1 second' WHERE id = $1",
            &[&store.replica_id],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn orphans_of_a_lost_replica_are_closed_exactly_once() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let a = open(&db, "a").await;
    let b = open(&db, "b").await;
    let c = open(&db, "c").await;
    let pending = create(&a, None, 1_000).await;
    let running = create(&a, None, 2_000).await;
    a.apply(&running.id, Event::Start, Patch::default(), 2_100)
        .await
        .unwrap();
    let done = create(&a, None, 3_000).await;
    a.apply(&done.id, Event::Start, Patch::default(), 3_100)
        .await
        .unwrap();
    let done = moved(
        a.apply(&done.id, Event::Complete, Patch::default(), 3_200)
            .await
            .unwrap(),
    )
    .worker;
    let bs_own = create(&b, None, 4_000).await;

    // While a lives, nothing is an orphan.
    assert_eq!(b.open_workers().await.unwrap(), []);
    assert_eq!(b.close_orphans(5_000).await.unwrap(), []);

    expire(&a).await;
    assert_eq!(
        b.open_workers().await.unwrap(),
        [pending.id.clone(), running.id.clone()]
    );
    // Two sweepers at once: every orphan closed by exactly one of them.
    let (by_b, by_c) = tokio::join!(b.close_orphans(9_000), c.close_orphans(9_000));
    let (by_b, by_c) = (by_b.unwrap(), by_c.unwrap());
    let all: HashSet<_> = by_b.iter().chain(&by_c).cloned().collect();
    assert_eq!(by_b.len() + by_c.len(), 2, "{by_b:?} {by_c:?}");
    assert_eq!(all, HashSet::from([pending.id.clone(), running.id.clone()]));
    for (rec, sequence) in [(&pending, 2), (&running, 3)] {
        let now = b.get(&rec.id).await.unwrap().unwrap();
        assert_eq!(now.state, WorkerState::Failed);
        assert_eq!(now.error.as_deref(), Some("orphaned: replica a lost"));
        assert_eq!(now.close_time_ms, Some(9_000));
        assert_eq!(now.token_hash, None);
        assert_eq!(now.sequence, sequence);
        assert_eq!(
            b.events_after(&rec.id, 0).await.unwrap().len() as u64,
            sequence
        );
    }
    assert_eq!(b.get(&done.id).await.unwrap(), Some(done));
    assert_eq!(
        b.get(&bs_own.id).await.unwrap().unwrap().state,
        WorkerState::Pending
    );
    assert_eq!(c.close_orphans(10_000).await.unwrap(), []);

    // The zombie owner's late outcome never overwrites the orphan close.
    let late = a
        .apply(&running.id, Event::Complete, Patch::default(), 11_000)
        .await;
    assert!(matches!(late, Err(StoreError::Illegal(_))), "{late:?}");
    // Renewing tells the owner its lease had lapsed.
    assert_eq!(a.renew_lease().await.unwrap(), Lease::Lapsed);
    assert_eq!(a.renew_lease().await.unwrap(), Lease::Renewed);
}

#[tokio::test]
async fn a_stop_request_reaches_the_owner() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let a = open(&db, "a").await;
    let b = open(&db, "b").await;
    let mut notices = a.notices();
    let rec = create(&a, None, 1_000).await;
    assert!(b.request_stop(&rec.id, "from b").await.unwrap());
    assert_eq!(
        a.stop_requests().await.unwrap(),
        [(rec.id.clone(), "from b".to_owned())]
    );
    assert!(b.stop_requests().await.unwrap().is_empty());
    let stop = loop {
        let n = tokio::time::timeout(Duration::from_secs(10), notices.recv())
            .await
            .unwrap()
            .unwrap();
        if matches!(n, Notice::Stop { .. }) {
            break n;
        }
    };
    assert_eq!(
        stop,
        Notice::Stop {
            worker_id: rec.id.clone()
        }
    );
    // The owner kills it: the request is done with, and a terminal row takes none.
    a.apply(&rec.id, Event::Kill, Patch::default(), 2_000)
        .await
        .unwrap();
    assert!(a.stop_requests().await.unwrap().is_empty());
    assert!(!b.request_stop(&rec.id, "again").await.unwrap());
}

#[tokio::test]
async fn events_committed_anywhere_are_announced_everywhere() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let a = open(&db, "a").await;
    let b = open(&db, "b").await;
    let mut on_b = b.notices();
    let _following = b.follow_events();
    announcing(&a, &mut on_b).await;
    let mut on_a = a.notices();
    let rec = create(&a, None, 1_000).await;
    a.apply(&rec.id, Event::Start, Patch::default(), 1_100)
        .await
        .unwrap();
    // Both replicas hear both events; only `a` hears them as its own.
    for (notices, own) in [(&mut on_b, false), (&mut on_a, true)] {
        let mut seen = Vec::new();
        while seen.len() < 2 {
            match tokio::time::timeout(Duration::from_secs(10), notices.recv())
                .await
                .unwrap()
                .unwrap()
            {
                Notice::Event {
                    worker_id,
                    sequence,
                    by_this_replica,
                } if worker_id == rec.id => seen.push((sequence, by_this_replica)),
                _ => {}
            }
        }
        assert_eq!(seen, [(1, own), (2, own)]);
    }
    // Creates written at once share a batch and its one notification: every worker in it is
    // announced to the other replica.
    let batch: Vec<_> =
        futures_util::future::join_all((0..20).map(|n| create(&a, None, 3_000 + n))).await;
    let mut unheard: std::collections::HashSet<_> = batch.iter().map(|r| r.id.clone()).collect();
    while !unheard.is_empty() {
        let n = tokio::time::timeout(Duration::from_secs(10), on_b.recv())
            .await
            .expect("every creation announced")
            .unwrap();
        if let Notice::Event {
            worker_id,
            sequence: 1,
            by_this_replica: false,
        } = n
        {
            unheard.remove(&worker_id);
        }
    }
}

/// Once `store` announces its events to `notices` (its creates heard there), within ten
/// seconds.
async fn announcing(store: &PostgresStore, notices: &mut broadcast::Receiver<Notice>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let rec = create(store, None, 500).await;
        let heard = tokio::time::timeout(Duration::from_millis(200), async {
            loop {
                if let Ok(Notice::Event { worker_id, .. }) = notices.recv().await
                    && worker_id == rec.id
                {
                    return;
                }
            }
        });
        if heard.await.is_ok() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not announced within ten seconds of following"
        );
    }
}

/// Whether `notices` brings an event of `id` within `within`, and whether a resync came first.
async fn heard_of(
    notices: &mut broadcast::Receiver<Notice>,
    id: &WorkerId,
    within: Duration,
) -> (bool, bool) {
    let mut resync = false;
    let heard = tokio::time::timeout(within, async {
        loop {
            match notices.recv().await {
                Ok(Notice::Event { worker_id, .. }) if worker_id == *id => return,
                Ok(Notice::Resync) => resync = true,
                _ => {}
            }
        }
    })
    .await
    .is_ok();
    (heard, resync)
}

#[tokio::test]
async fn events_are_announced_only_while_another_replica_follows_them() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let a = open(&db, "a").await;
    let b = open(&db, "b").await;
    let mut on_a = a.notices();
    let mut on_b = b.notices();
    // Each has read that no one follows.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let quiet = create(&a, None, 1_000).await;
    a.apply(&quiet.id, Event::Start, Patch::default(), 1_100)
        .await
        .unwrap();
    assert_eq!(
        heard_of(&mut on_b, &quiet.id, Duration::from_millis(500)).await,
        (false, false),
        "announced with no follower"
    );
    // A transition of a worker another replica owns is announced to its owner all the same.
    b.apply(&quiet.id, Event::Complete, Patch::default(), 1_200)
        .await
        .unwrap();
    assert!(
        heard_of(&mut on_a, &quiet.id, Duration::from_secs(10))
            .await
            .0,
        "the owner did not hear of its worker's transition by another replica"
    );
    // `b` follows: `a` learns it, tells every replica to read again (a resync), and
    // announces its events from then on.
    let following = b.follow_events();
    let rec = create(&a, None, 2_000).await;
    let mut resync = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !resync {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no resync within ten seconds of following"
        );
        resync = matches!(
            tokio::time::timeout(Duration::from_millis(100), on_b.recv()).await,
            Ok(Ok(Notice::Resync))
        );
    }
    a.apply(&rec.id, Event::Start, Patch::default(), 2_100)
        .await
        .unwrap();
    assert!(
        heard_of(&mut on_b, &rec.id, Duration::from_secs(10))
            .await
            .0,
        "not announced to a follower"
    );
    // The row says so, and the follower's end lingers before it is written.
    let follows = |id: String| {
        let pool = a.pool.clone();
        async move {
            let c = pool.get().await.unwrap();
            c.query_one("SELECT follows_events FROM replicas WHERE id = $1", &[&id])
                .await
                .unwrap()
                .get::<_, bool>(0)
        }
    };
    assert!(follows(b.replica_id.clone()).await);
    assert!(!follows(a.replica_id.clone()).await);
    drop(following);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(follows(b.replica_id.clone()).await, "no linger");
}

#[tokio::test]
async fn runner_notices_carry_every_published_wait_and_reach_only_their_addressee() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let (a, b, c) = (
        open(&db, "a").await,
        open(&db, "b").await,
        open(&db, "c").await,
    );
    let (mut on_b, mut on_c) = (b.runner_notices(), c.runner_notices());
    listening(&b, &mut on_b).await;
    listening(&c, &mut on_c).await;
    // Waits published at once share a statement and its one notice, which carries each whole.
    let workers: Vec<_> =
        futures_util::future::join_all((0..20).map(|n| create(&a, None, 1_000 + n))).await;
    let waits: Vec<RunnerWait> = workers
        .iter()
        .map(|w| RunnerWait {
            worker_id: w.id.clone(),
            owner: a.replica_id().to_owned(),
            agent: "reviewer".to_owned(),
            caller_scope: "team:a".to_owned(),
            deadline_ms: 9_000,
        })
        .collect();
    for r in futures_util::future::join_all(waits.iter().map(|w| a.publish_runner_wait(w))).await {
        r.unwrap();
    }
    let mut unheard: HashSet<_> = waits.iter().map(|w| w.worker_id.clone()).collect();
    while !unheard.is_empty() {
        let n = tokio::time::timeout(Duration::from_secs(10), on_b.recv())
            .await
            .expect("every published wait carried by a notice")
            .unwrap();
        match n {
            RunnerNotice::Wait(Some(w)) => {
                assert!(waits.contains(&w), "{w:?}");
                unheard.remove(&w.worker_id);
            }
            RunnerNotice::Resync => {}
            other => panic!("not a runner notice, or one without its wait: {other:?}"),
        }
    }
    // Waits too large to carry in a notice are still published, and their notice says "read
    // the waits" (`[]`) instead of failing the statement (PostgreSQL refuses a payload of 8000
    // bytes or more).
    let big = create(&a, None, 4_000).await;
    let big_wait = RunnerWait {
        worker_id: big.id.clone(),
        agent: "x".repeat(8_000),
        ..waits[0].clone()
    };
    a.publish_runner_wait(&big_wait).await.unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), on_b.recv())
            .await
            .expect("a notice for the large wait")
            .unwrap()
        {
            RunnerNotice::Wait(None) => break,
            RunnerNotice::Resync => {}
            other => panic!("not a notice to read the waits: {other:?}"),
        }
    }
    assert!(b.runner_waits(64).await.unwrap().contains(&big_wait));
    // A relay to `b` reaches `b` with its message; `c` never sees it: the wait published after
    // it is the next runner notice `c` gets.
    let id = &workers[0].id;
    a.relay(b.replica_id(), id, vec!["hello".to_owned()], false)
        .await
        .unwrap();
    let last = create(&a, None, 5_000).await;
    a.publish_runner_wait(&RunnerWait {
        worker_id: last.id.clone(),
        ..waits[0].clone()
    })
    .await
    .unwrap();
    let relayed = tokio::time::timeout(Duration::from_secs(10), on_b.recv())
        .await
        .expect("the relay announced to its addressee")
        .unwrap();
    let RunnerNotice::Relay {
        relayed: Some(messages),
    } = relayed
    else {
        panic!("not the relay, carried: {relayed:?}");
    };
    assert_eq!(
        messages
            .iter()
            .map(|m| m.message.as_str())
            .collect::<Vec<_>>(),
        ["hello"]
    );
    loop {
        match tokio::time::timeout(Duration::from_secs(10), on_c.recv())
            .await
            .expect("the last wait announced to c")
            .unwrap()
        {
            RunnerNotice::Wait(Some(w)) if w.worker_id == last.id => break,
            RunnerNotice::Wait(_) | RunnerNotice::Resync => {}
            other => panic!("c got a notice not for it: {other:?}"),
        }
    }
    // Relays written at once share a statement and its one notice per addressee: each is
    // carried to `b`, in order.
    let both = || vec!["one".to_owned(), "two".to_owned()];
    let sends = workers[1..11]
        .iter()
        .map(|w| a.relay(b.replica_id(), &w.id, both(), false));
    for r in futures_util::future::join_all(sends).await {
        r.unwrap();
    }
    let mut heard: std::collections::HashMap<WorkerId, Vec<String>> = Default::default();
    while heard.values().map(Vec::len).sum::<usize>() < 20 {
        match tokio::time::timeout(Duration::from_secs(10), on_b.recv())
            .await
            .expect("every relay carried to its addressee")
            .unwrap()
        {
            RunnerNotice::Relay {
                relayed: Some(messages),
            } => {
                for m in messages {
                    heard.entry(m.worker_id).or_default().push(m.message);
                }
            }
            RunnerNotice::Wait(_) | RunnerNotice::Resync => {}
            other => panic!("{other:?}"),
        }
    }
    for w in &workers[1..11] {
        assert_eq!(heard[&w.id], ["one", "two"]);
    }
}

/// The next runner notice on `rx` other than a resync, within ten seconds.
async fn next_runner_notice(rx: &mut broadcast::Receiver<RunnerNotice>) -> RunnerNotice {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a runner notice within ten seconds")
            .unwrap()
        {
            RunnerNotice::Resync => {}
            n => return n,
        }
    }
}

/// Turns on `store`'s listening for runner waits and waits until it took effect: the notice
/// that says "read the waits" arrives on `rx`.
async fn listening(store: &PostgresStore, rx: &mut broadcast::Receiver<RunnerNotice>) {
    store.listen_for_waits(true);
    let n = next_runner_notice(rx).await;
    assert_eq!(n, RunnerNotice::Wait(None), "the notice after LISTEN");
}

#[tokio::test]
async fn a_replica_hears_of_waits_only_while_it_listens_for_them() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let (a, b) = (open(&db, "a").await, open(&db, "b").await);
    let mut on_b = b.runner_notices();
    let waits: Vec<RunnerWait> =
        futures_util::future::join_all((0..3).map(|n| create(&a, None, 1_000 + n)))
            .await
            .into_iter()
            .map(|w| RunnerWait {
                worker_id: w.id,
                owner: a.replica_id().to_owned(),
                agent: "reviewer".to_owned(),
                caller_scope: "team:a".to_owned(),
                deadline_ms: 9_000,
            })
            .collect();
    // Not listening (a new store, no runner): a wait's notice never comes, though a relay
    // committed after it does.
    let relay_after = |i: usize, text: &'static str| {
        a.relay(
            b.replica_id(),
            &waits[i].worker_id,
            vec![text.to_owned()],
            false,
        )
    };
    a.publish_runner_wait(&waits[0]).await.unwrap();
    relay_after(0, "after the first").await.unwrap();
    let n = next_runner_notice(&mut on_b).await;
    assert!(
        matches!(n, RunnerNotice::Relay { .. }),
        "not the relay: {n:?}"
    );
    // Turned on: "read the waits" first, and the wait published meanwhile is there to read;
    // then each new wait comes with its notice.
    listening(&b, &mut on_b).await;
    assert!(b.runner_waits(64).await.unwrap().contains(&waits[0]));
    a.publish_runner_wait(&waits[1]).await.unwrap();
    assert_eq!(
        next_runner_notice(&mut on_b).await,
        RunnerNotice::Wait(Some(waits[1].clone()))
    );
    // Off again (the last runner went): silent once more.
    b.listen_for_waits(false);
    // In effect once the listener's session ran the UNLISTEN (its last statement, as the
    // server shows it).
    let client = b.client().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while client
        .query_opt(
            "SELECT 1 FROM pg_stat_activity
              WHERE datname = current_database() AND query = 'UNLISTEN agentry_runner_waits'",
            &[],
        )
        .await
        .unwrap()
        .is_none()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no UNLISTEN within ten seconds"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.publish_runner_wait(&waits[2]).await.unwrap();
    relay_after(2, "after the third").await.unwrap();
    loop {
        match next_runner_notice(&mut on_b).await {
            RunnerNotice::Relay { relayed: Some(m) }
                if m.iter().any(|m| m.message == "after the third") =>
            {
                break;
            }
            RunnerNotice::Relay { .. } => {}
            other => panic!("a notice while not listening for waits: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_take_deletes_every_relay_and_returns_those_not_applied_in_order() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let (a, b) = (open(&db, "a").await, open(&db, "b").await);
    let mut on_b = b.runner_notices();
    let w = create(&a, None, 1_000).await;
    let texts = ["one", "two", "three"].map(str::to_owned);
    a.relay(b.replica_id(), &w.id, texts.to_vec(), false)
        .await
        .unwrap();
    // The notice carries them with their sequences, as the owner applies them.
    let RunnerNotice::Relay {
        relayed: Some(carried),
    } = next_runner_notice(&mut on_b).await
    else {
        panic!("the relay's notice, carried");
    };
    assert_eq!(carried.len(), 3);
    // Told that the second was applied (its notice brought it), a take returns the others in
    // order, and deletes all three: the next take finds nothing.
    let taken = b.take_relays(&[carried[1].seq]).await.unwrap();
    assert_eq!(
        taken.iter().map(|r| r.message.as_str()).collect::<Vec<_>>(),
        ["one", "three"]
    );
    assert_eq!(taken[0].seq, carried[0].seq);
    assert!(b.take_relays(&[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_dedupe_claim_is_won_once_across_replicas() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let a = open(&db, "a").await;
    let b = open(&db, "b").await;
    let ttl = Duration::from_secs(60);
    let wa = create(&a, None, 1_000).await;
    let wb = create(&b, None, 1_000).await;
    let (ra, rb) = tokio::join!(
        a.claim_dedupe("key", &wa.id, ttl),
        b.claim_dedupe("key", &wb.id, ttl)
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    let winner = match (&ra, &rb) {
        (None, Some(holder)) => {
            assert_eq!(*holder, wa.id);
            &wa
        }
        (Some(holder), None) => {
            assert_eq!(*holder, wb.id);
            &wb
        }
        other => panic!("exactly one claim must win: {other:?}"),
    };
    // A failed worker's claim is taken over by the next dispatch.
    a.apply(&winner.id, Event::Fail, Patch::default(), 2_000)
        .await
        .unwrap();
    let next = create(&a, None, 3_000).await;
    assert_eq!(a.claim_dedupe("key", &next.id, ttl).await.unwrap(), None);
    assert_eq!(
        b.claim_dedupe("key", &wb.id, ttl).await.unwrap(),
        Some(next.id.clone())
    );
    // An expired claim too.
    let short = Duration::from_millis(1);
    a.release_dedupe("key", &next.id).await.unwrap();
    assert_eq!(a.claim_dedupe("key", &next.id, short).await.unwrap(), None);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(b.claim_dedupe("key", &wb.id, ttl).await.unwrap(), None);
}

#[tokio::test]
async fn a_claimed_create_writes_its_row_only_with_its_claim() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let a = open(&db, "a").await;
    let b = open(&db, "b").await;
    let ttl = Duration::from_secs(60);
    let (wa, wb) = (suite::record(None, 1_000), suite::record(None, 1_000));
    let (ra, rb) = tokio::join!(
        a.create_claimed(&wa, Some(("key", ttl))),
        b.create_claimed(&wb, Some(("key", ttl)))
    );
    let (winner, loser) = match (ra, rb) {
        (Ok(ev), Err(StoreError::DedupeHeld { holder })) => {
            assert_eq!(holder, wa.id);
            (ev.worker, &wb)
        }
        (Err(StoreError::DedupeHeld { holder }), Ok(ev)) => {
            assert_eq!(holder, wb.id);
            (ev.worker, &wa)
        }
        other => panic!("exactly one claimed create must win: {other:?}"),
    };
    assert_eq!(
        a.get(&loser.id).await.unwrap(),
        None,
        "the loser wrote nothing"
    );
    assert_eq!(b.get(&winner.id).await.unwrap().unwrap().id, winner.id);
    // Another key, or none, is not held by it.
    a.create_claimed(&suite::record(None, 1_100), Some(("other", ttl)))
        .await
        .unwrap();
    a.create_claimed(&suite::record(None, 1_100), None)
        .await
        .unwrap();
    // A failed worker's claim is taken over by the next claimed create.
    a.apply(&winner.id, Event::Fail, Patch::default(), 2_000)
        .await
        .unwrap();
    let next = suite::record(None, 3_000);
    let created = b.create_claimed(&next, Some(("key", ttl))).await.unwrap();
    assert_eq!(created.worker.id, next.id);
    let err = a
        .create_claimed(&suite::record(None, 3_100), Some(("key", ttl)))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::DedupeHeld { holder } if *holder == next.id),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_newer_schema_is_refused_naming_both_versions() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let store = open(&db, "a").await;
    let known = MIGRATIONS.len() as i64;
    store
        .client()
        .await
        .unwrap()
        .execute("UPDATE agentry_schema SET version = 999", &[])
        .await
        .unwrap();
    let err = PostgresStore::open(&db.url, replica("b", 60_000))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::SchemaTooNew { found: 999, known: k } if k == known),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("version 999") && message.contains(&format!("(version {known})")),
        "{message}"
    );
}

#[tokio::test]
async fn the_hot_tables_carry_no_check_constraints_after_migration_16() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let store = open(&db, "a").await;
    let client = store.client().await.unwrap();
    let left: Vec<String> = client
        .query(
            "SELECT conrelid::regclass::text || '.' || conname FROM pg_constraint
              WHERE contype = 'c' AND conrelid IN ('workers'::regclass, 'worker_events'::regclass)
              ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // Each DROP names its constraint `IF EXISTS`: a misspelt name would leave one silently.
    assert_eq!(left, Vec::<String>::new());
    // Constraints elsewhere are untouched: the schema's version row keeps its two.
    let kept: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_constraint
              WHERE contype = 'c' AND conrelid = 'agentry_schema'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 2, "agentry_schema's one-row and version checks");
}

#[tokio::test]
async fn replicas_starting_together_migrate_once() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let mut stores = Vec::new();
    for i in 0..4 {
        let url = db.url.clone();
        stores.push(tokio::spawn(async move {
            PostgresStore::open(&url, replica(&format!("r{i}"), 60_000)).await
        }));
    }
    for s in stores {
        s.await.unwrap().unwrap();
    }
    let store = open(&db, "check").await;
    let client = store.client().await.unwrap();
    assert_eq!(
        schema::schema_version(&client).await.unwrap(),
        MIGRATIONS.len() as i64
    );
    let replicas: i64 = client
        .query_one("SELECT count(*) FROM replicas", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(replicas, 5);
}

#[tokio::test]
async fn an_unreachable_database_is_named_without_its_password() {
    // Port 1 on loopback: nothing listens there.
    let err = PostgresStore::open(
        "postgres://agentry:s3cret@127.0.0.1:1/agentry",
        replica("a", 1_000),
    )
    .await
    .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, StoreError::Unreachable { .. }), "{err:?}");
    assert!(
        message.contains("postgres://agentry:***@127.0.0.1:1/agentry"),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");
}

#[test]
fn urls_lose_their_passwords() {
    for (url, shown) in [
        ("postgres://u:p@h:5432/db", "postgres://u:***@h:5432/db"),
        ("postgres://u@h/db", "postgres://u@h/db"),
        (
            "postgresql://h/db?password=x&sslmode=disable",
            "postgresql://h/db?password=***&sslmode=disable",
        ),
        (
            "host=h user=u password=x dbname=d",
            "host=h user=u password=*** dbname=d",
        ),
        ("postgres://u:p%40ss@h", "postgres://u:***@h"),
    ] {
        assert_eq!(redact_url(url), shown, "{url}");
    }
}

#[tokio::test]
async fn a_refused_statement_names_the_servers_reason() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let a = open(&db, "a").await;
    let client = a.client().await.unwrap();
    let e = client
        .execute("SELECT 1 / 0", &[])
        .await
        .pg("divide")
        .unwrap_err();
    // tokio-postgres's own text is only "db error"; the server's reason must be in the message.
    let StoreError::Postgres { context, message } = e else {
        panic!("not a refusal: {e:?}");
    };
    assert_eq!(context, "divide");
    assert!(message.contains("division by zero"), "{message}");
}

/// The transaction ids that last wrote these workers' rows: writes of one batch share one.
async fn writers(store: &PostgresStore, ids: &[&WorkerId]) -> HashSet<String> {
    let ids: Vec<&str> = ids.iter().map(|id| id.as_str()).collect();
    store
        .client()
        .await
        .unwrap()
        .query("SELECT xmin::text FROM workers WHERE id = ANY($1)", &[&ids])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect()
}

/// Starts two workers, the second 20 ms after the first, each written on its own.
async fn start_apart(store: &PostgresStore, first: &WorkerRecord, second: &WorkerRecord) {
    let start = |w: &WorkerRecord, pause_ms: u64| {
        let id = w.id.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            moved(
                store
                    .apply(&id, Event::Start, Patch::default(), 2_100)
                    .await
                    .unwrap(),
            )
        }
    };
    let (a, b) = tokio::join!(start(first, 0), start(second, 20));
    assert_eq!((a.sequence, b.sequence), (2, 2));
}

/// `replica.commit_window`: while other workers of the replica are open, a batch stays open
/// for writes that come within the window, and they commit together; a worker alone on its
/// replica, or a window of zero, is written at once.
#[tokio::test]
async fn a_batch_stays_open_for_the_window_only_while_other_workers_are_open() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let settings = |window_ms| ReplicaSettings {
        commit_window: Duration::from_millis(window_ms),
        ..replica("gather", 60_000)
    };
    let gathering = PostgresStore::open(&db.url, settings(400)).await.unwrap();
    // Alone: a worker's writes go at once, however long the window.
    let alone = create(&gathering, None, 1_000).await;
    let began = std::time::Instant::now();
    gathering
        .apply(&alone.id, Event::Start, Patch::default(), 1_100)
        .await
        .unwrap();
    assert!(
        began.elapsed() < Duration::from_millis(300),
        "{:?}",
        began.elapsed()
    );
    // Three open: starts sent 20 ms apart share one commit.
    let (a, b) = (
        create(&gathering, None, 2_000).await,
        create(&gathering, None, 2_001).await,
    );
    start_apart(&gathering, &a, &b).await;
    assert_eq!(writers(&gathering, &[&a.id, &b.id]).await.len(), 1);
    drop(gathering);

    // No window: the same writes, each its own commit.
    let at_once = PostgresStore::open(&db.url, settings(0)).await.unwrap();
    let (c, d) = (
        create(&at_once, None, 3_000).await,
        create(&at_once, None, 3_001).await,
    );
    start_apart(&at_once, &c, &d).await;
    assert_eq!(writers(&at_once, &[&c.id, &d.id]).await.len(), 2);
}
