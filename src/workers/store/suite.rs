//! The behaviour every [`WorkerStore`] backend must have, as one suite of async tests each
//! backend instantiates unchanged with [`store_suite!`] (SQLite in `sqlite`'s tests, PostgreSQL
//! in its own).

use std::{slice, sync::Arc};

use super::{Applied, ListQuery, ParentFilter, Patch, StoreError, WorkerStore};
use crate::resolve::{Effective, Mode, Tools};
use crate::workers::lifecycle::{Event, IllegalTransition};
use crate::workers::model::{
    Progress, ProgressKind, SpawnSpec, WorkerEvent, WorkerId, WorkerRecord, WorkerState,
    generate_token, hash_token,
};

/// Instantiates every test of the suite for one backend: `$open` is an async expression giving
/// `Some((guard, store))`, where the guard keeps the backend's resources (a directory, a
/// database) alive until the test ends, or `None` when the backend is not available here (the
/// test then passes without running; the backend says so).
///
/// The start-up close of orphans is not in the suite: what counts as an orphan is the one
/// thing the backends define differently (SQLite: every open row of the file; PostgreSQL: the
/// open rows of replicas whose lease expired), so each backend tests its own.
macro_rules! store_suite {
    ($open:expr) => {
        #[tokio::test]
        async fn artifacts_are_assembled_on_the_row_and_bounded() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::artifacts_are_assembled_on_the_row_and_bounded(&*store).await;
        }
        #[tokio::test]
        async fn progress_is_an_event_between_transitions() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::progress_is_an_event_between_transitions(&*store).await;
        }
        #[tokio::test]
        async fn the_inbox_its_seal_continuations_and_transcripts() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::the_inbox_its_seal_continuations_and_transcripts(&*store).await;
        }
        #[tokio::test]
        async fn a_worker_that_asks_keeps_its_token_and_is_not_an_orphan() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::a_worker_that_asks_keeps_its_token_and_is_not_an_orphan(&*store).await;
        }
        #[tokio::test]
        async fn list_filters_by_caller_scope() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::list_filters_by_caller_scope(&*store).await;
        }
        #[tokio::test]
        async fn create_then_get_round_trips() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::create_then_get_round_trips(&*store).await;
        }
        #[tokio::test]
        async fn create_ignores_lifecycle_fields_of_the_input() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::create_ignores_lifecycle_fields_of_the_input(&*store).await;
        }
        #[tokio::test]
        async fn full_run_has_sequences_1_2_3_and_closes_only_at_the_end() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::full_run_has_sequences_1_2_3_and_closes_only_at_the_end(&*store).await;
        }
        #[tokio::test]
        async fn kill_is_absorbed_once_killed() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::kill_is_absorbed_once_killed(&*store).await;
        }
        #[tokio::test]
        async fn stopping_a_finished_worker_is_not_cancelable_and_changes_nothing() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::stopping_a_finished_worker_is_not_cancelable_and_changes_nothing(&*store).await;
        }
        #[tokio::test]
        async fn invalid_events_and_unknown_ids_are_errors() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::invalid_events_and_unknown_ids_are_errors(&*store).await;
        }
        #[tokio::test]
        async fn events_after_resumes_after_a_seen_sequence() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::events_after_resumes_after_a_seen_sequence(&*store).await;
        }
        #[tokio::test]
        async fn list_filters_by_parent() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::list_filters_by_parent(&*store).await;
        }
        #[tokio::test]
        async fn list_filters_by_states() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::list_filters_by_states(&*store).await;
        }
        #[tokio::test]
        async fn pagination_walks_every_worker_once_across_pages() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::pagination_walks_every_worker_once_across_pages(&*store).await;
        }
        #[tokio::test]
        async fn duplicate_request_id_is_refused_per_caller_scope() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::duplicate_request_id_is_refused_per_caller_scope(&*store).await;
        }
        #[tokio::test]
        async fn token_lookup_stops_once_the_worker_is_terminal() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::token_lookup_stops_once_the_worker_is_terminal(&*store).await;
        }
        #[tokio::test]
        async fn a_parent_must_exist() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::a_parent_must_exist(&*store).await;
        }
        #[tokio::test]
        async fn concurrent_callers_each_see_consistent_runs() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::concurrent_callers_each_see_consistent_runs(&*store).await;
        }
        #[tokio::test]
        async fn a_replica_s_own_rows_are_never_remote() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::a_replica_s_own_rows_are_never_remote(store).await;
        }
        #[tokio::test]
        async fn a_transition_from_a_stale_record_is_decided_on_the_row() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::a_transition_from_a_stale_record_is_decided_on_the_row(&*store).await;
        }
        #[tokio::test]
        async fn a_start_written_with_its_end_keeps_both_events() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::a_start_written_with_its_end_keeps_both_events(&*store).await;
        }
        #[tokio::test]
        async fn writes_made_together_each_get_their_own_answer() {
            let Some((_guard, store)): Option<(_, std::sync::Arc<dyn $crate::workers::store::WorkerStore>)> =
                $open.await else { return };
            $crate::workers::store::suite::writes_made_together_each_get_their_own_answer(&*store).await;
        }
    };
}
pub(crate) use store_suite;

/// Runs futures concurrently on the current task and collects their outputs in order.
async fn join_all<T, F: std::future::Future<Output = T>>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<T> {
    let mut pending: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<T>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (f, done) in pending.iter_mut().zip(out.iter_mut()) {
            if done.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *done = Some(v),
                    std::task::Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// The effective agent of the suite's workers.
fn effective(depth: u32) -> Effective {
    Effective {
        name: "explore".to_owned(),
        system_prompt: "You explore the repository.".to_owned(),
        tools: Tools::AllExcept(vec!["task".to_owned()]),
        tool_rules: Vec::new(),
        spawns: crate::persona::Spawns::none(),
        model: Vec::new(),
        thinking_level: None,
        max_turns: None,
        permission_mode: None,
        output_schema: None,
        output_schema_source: None,
        mode: Mode::Default,
        depth,
        at_max_depth: false,
        memory_dir: None,
        mcp_servers: None,
        interactive: false,
        remote: None,
    }
}

/// A new worker record, as the supervisor would build it.
pub(crate) fn record(parent: Option<&WorkerRecord>, create_time_ms: i64) -> WorkerRecord {
    WorkerRecord::new(
        WorkerId::generate(),
        Arc::new(SpawnSpec {
            agent: "explore".to_owned(),
            description: "look around".to_owned(),
            prompt: "find where the config is loaded".to_owned(),
            workspace: Some("/work/project".to_owned()),
            parent_id: parent.map(|p| p.id.clone()),
            depth: parent.map_or(1, |p| p.spec.depth + 1),
            create_time_ms,
            caller_scope: "anonymous".to_owned(),
            request_id: None,
            continues: None,
            context_id: None,
            a2a_message: None,
            effective: effective(parent.map_or(1, |p| p.spec.depth + 1)),
        }),
        Some(hash_token(&generate_token())),
    )
}

/// Creates a fresh worker and returns it as stored.
pub(crate) async fn create(
    store: &dyn WorkerStore,
    parent: Option<&WorkerRecord>,
    time: i64,
) -> WorkerRecord {
    store.create(&record(parent, time)).await.unwrap().worker
}

pub(crate) fn moved(applied: Applied) -> WorkerEvent {
    match applied {
        Applied::Moved(event) => event,
        Applied::Absorbed(worker) => panic!("expected a move, got absorbed {worker:?}"),
    }
}

pub(crate) fn ids(records: &[WorkerRecord]) -> Vec<WorkerId> {
    records.iter().map(|r| r.id.clone()).collect()
}

fn query(parent: ParentFilter, states: &[WorkerState]) -> ListQuery {
    ListQuery {
        parent,
        states: states.to_vec(),
        caller_scope: None,
        context_id: None,
        agent: None,
        newest_first: false,
        after: None,
        limit: 100,
    }
}

pub(crate) async fn create_then_get_round_trips(store: &dyn WorkerStore) {
    let mut rec = record(None, 1_000);
    Arc::make_mut(&mut rec.spec).request_id = Some("req-1".to_owned());
    rec.structured_result = None;
    let event = store.create(&rec).await.unwrap();
    assert_eq!(event.sequence, 1);
    assert_eq!(event.state, WorkerState::Pending);
    assert_eq!(event.time_ms, 1_000);
    assert_eq!(event.worker_id, rec.id);
    assert_eq!(event.worker, rec);
    assert_eq!(store.get(&rec.id).await.unwrap(), Some(rec));
    assert_eq!(store.get(&WorkerId::generate()).await.unwrap(), None);
}

pub(crate) async fn create_ignores_lifecycle_fields_of_the_input(store: &dyn WorkerStore) {
    let mut rec = record(None, 1_000);
    rec.state = WorkerState::Completed;
    rec.sequence = 7;
    rec.start_time_ms = Some(1);
    rec.close_time_ms = Some(2);
    rec.result = Some("stale".to_owned());
    rec.error = Some("stale".to_owned());
    rec.exit_code = Some(3);
    let stored = store.create(&rec).await.unwrap().worker;
    assert_eq!(stored.state, WorkerState::Pending);
    assert_eq!(stored.sequence, 1);
    assert_eq!(
        (stored.start_time_ms, stored.close_time_ms, stored.exit_code),
        (None, None, None)
    );
    assert_eq!((stored.result, stored.error), (None, None));
}

pub(crate) async fn full_run_has_sequences_1_2_3_and_closes_only_at_the_end(
    store: &dyn WorkerStore,
) {
    let created = store.create(&record(None, 1_000)).await.unwrap();
    let id = created.worker_id.clone();

    let started = moved(
        store
            .apply(&id, Event::Start, Patch::default(), 2_000)
            .await
            .unwrap(),
    );
    assert_eq!(
        (started.sequence, started.state, started.time_ms),
        (2, WorkerState::Running, 2_000)
    );
    assert_eq!(started.worker.start_time_ms, Some(2_000));
    assert_eq!(started.worker.close_time_ms, None);
    assert!(started.worker.token_hash.is_some());

    let patch = Patch {
        result: Some("{\"ok\":true}".to_owned()),
        structured_result: Some("{\"ok\":true}".to_owned()),
        exit_code: Some(0),
        ..Patch::default()
    };
    let done = moved(
        store
            .apply(&id, Event::Complete, patch, 3_000)
            .await
            .unwrap(),
    );
    assert_eq!((done.sequence, done.state), (3, WorkerState::Completed));
    assert_eq!(done.worker.start_time_ms, Some(2_000));
    assert_eq!(done.worker.close_time_ms, Some(3_000));
    assert_eq!(done.worker.token_hash, None);
    assert_eq!(done.worker.exit_code, Some(0));
    assert_eq!(done.worker.result.as_deref(), Some("{\"ok\":true}"));
    assert_eq!(store.get(&id).await.unwrap(), Some(done.worker.clone()));

    let events = store.events_after(&id, 0).await.unwrap();
    assert_eq!(events, vec![created, started, done]);
}

pub(crate) async fn kill_is_absorbed_once_killed(store: &dyn WorkerStore) {
    let pending = create(store, None, 1_000).await;
    let killed = moved(
        store
            .apply(&pending.id, Event::Kill, Patch::default(), 1_500)
            .await
            .unwrap(),
    );
    assert_eq!((killed.sequence, killed.state), (2, WorkerState::Killed));
    assert_eq!(
        killed.worker.start_time_ms, None,
        "killed before it started"
    );
    assert_eq!(killed.worker.close_time_ms, Some(1_500));

    let again = Patch {
        error: Some("ignored".to_owned()),
        ..Patch::default()
    };
    let absorbed = store
        .apply(&pending.id, Event::Kill, again, 9_000)
        .await
        .unwrap();
    assert_eq!(absorbed, Applied::Absorbed(killed.worker.clone()));
    assert_eq!(absorbed.worker(), &killed.worker);
    assert_eq!(store.events_after(&pending.id, 0).await.unwrap().len(), 2);

    let running = create(store, None, 2_000).await;
    store
        .apply(&running.id, Event::Start, Patch::default(), 2_100)
        .await
        .unwrap();
    let stop = Patch {
        error: Some("stopped by caller".to_owned()),
        ..Patch::default()
    };
    let killed = moved(
        store
            .apply(&running.id, Event::Kill, stop, 2_200)
            .await
            .unwrap(),
    );
    assert_eq!((killed.sequence, killed.state), (3, WorkerState::Killed));
    assert_eq!(killed.worker.error.as_deref(), Some("stopped by caller"));
    assert_eq!(killed.worker.close_time_ms, Some(2_200));
}

pub(crate) async fn stopping_a_finished_worker_is_not_cancelable_and_changes_nothing(
    store: &dyn WorkerStore,
) {
    let completed = create(store, None, 1_000).await;
    store
        .apply(&completed.id, Event::Start, Patch::default(), 1_100)
        .await
        .unwrap();
    store
        .apply(&completed.id, Event::Complete, Patch::default(), 1_200)
        .await
        .unwrap();
    let failed = create(store, None, 2_000).await;
    store
        .apply(&failed.id, Event::Fail, Patch::default(), 2_100)
        .await
        .unwrap();

    for (id, state) in [
        (&completed.id, WorkerState::Completed),
        (&failed.id, WorkerState::Failed),
    ] {
        let before = store.get(id).await.unwrap();
        let err = store
            .apply(id, Event::Kill, Patch::default(), 5_000)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Illegal(IllegalTransition::NotCancelable { state: s }) if s == state
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("worker is already {state} and cannot be stopped")
        );
        assert_eq!(store.get(id).await.unwrap(), before);
    }
}

pub(crate) async fn invalid_events_and_unknown_ids_are_errors(store: &dyn WorkerStore) {
    let rec = create(store, None, 1_000).await;
    let err = store
        .apply(&rec.id, Event::Complete, Patch::default(), 1_100)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        StoreError::Illegal(IllegalTransition::Invalid {
            from: WorkerState::Pending,
            event: Event::Complete
        })
    ));
    assert_eq!(store.get(&rec.id).await.unwrap(), Some(rec));

    let unknown = WorkerId::generate();
    let err = store
        .apply(&unknown, Event::Start, Patch::default(), 1)
        .await
        .unwrap_err();
    assert!(matches!(&err, StoreError::NotFound(id) if *id == unknown));
    assert_eq!(err.to_string(), format!("worker {unknown} not found"));
    assert!(matches!(
        store.events_after(&unknown, 0).await,
        Err(StoreError::NotFound(_))
    ));
}

pub(crate) async fn events_after_resumes_after_a_seen_sequence(store: &dyn WorkerStore) {
    let rec = create(store, None, 1_000).await;
    store
        .apply(&rec.id, Event::Start, Patch::default(), 1_100)
        .await
        .unwrap();
    store
        .apply(&rec.id, Event::Fail, Patch::default(), 1_200)
        .await
        .unwrap();
    let id = &rec.id;
    let sequences = |after| async move {
        store
            .events_after(id, after)
            .await
            .unwrap()
            .iter()
            .map(|e| (e.sequence, e.state))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        sequences(1).await,
        [(2, WorkerState::Running), (3, WorkerState::Failed)]
    );
    assert_eq!(sequences(2).await, [(3, WorkerState::Failed)]);
    assert_eq!(sequences(3).await, []);
    assert_eq!(sequences(u64::MAX).await, []);
}

pub(crate) async fn list_filters_by_parent(store: &dyn WorkerStore) {
    let a = create(store, None, 1_000).await;
    let b = create(store, None, 2_000).await;
    let a1 = create(store, Some(&a), 3_000).await;
    let b1 = create(store, Some(&b), 4_000).await;
    let a2 = create(store, Some(&a), 5_000).await;
    let a1x = create(store, Some(&a1), 6_000).await;

    let of_b = store
        .list(&query(ParentFilter::Worker(b.id.clone()), &[]))
        .await
        .unwrap();
    assert_eq!(ids(&of_b), slice::from_ref(&b1.id));
    let of_a = store
        .list(&query(ParentFilter::Worker(a.id.clone()), &[]))
        .await
        .unwrap();
    assert_eq!(ids(&of_a), [a1.id.clone(), a2.id.clone()]);
    let of_a1 = store
        .list(&query(ParentFilter::Worker(a1.id.clone()), &[]))
        .await
        .unwrap();
    assert_eq!(ids(&of_a1), slice::from_ref(&a1x.id));
    let of_a2 = store
        .list(&query(ParentFilter::Worker(a2.id.clone()), &[]))
        .await
        .unwrap();
    assert_eq!(of_a2, []);
    let all = store.list(&query(ParentFilter::Any, &[])).await.unwrap();
    assert_eq!(ids(&all), [a.id, b.id, a1.id, b1.id, a2.id, a1x.id]);
}

pub(crate) async fn list_filters_by_states(store: &dyn WorkerStore) {
    let pending = create(store, None, 1_000).await;
    let running = create(store, None, 2_000).await;
    store
        .apply(&running.id, Event::Start, Patch::default(), 2_100)
        .await
        .unwrap();
    let failed = create(store, None, 3_000).await;
    store
        .apply(&failed.id, Event::Fail, Patch::default(), 3_100)
        .await
        .unwrap();
    let child = create(store, Some(&running), 4_000).await;
    // A completed worker is in no state index on PostgreSQL (`workers_by_state` leaves it out):
    // listed with or without other states, it is still found.
    let completed = create(store, None, 5_000).await;
    for (event, at) in [(Event::Start, 5_100), (Event::Complete, 5_200)] {
        store
            .apply(&completed.id, event, Patch::default(), at)
            .await
            .unwrap();
    }

    let list = |parent, states: &'static [WorkerState]| async move {
        ids(&store.list(&query(parent, states)).await.unwrap())
    };
    assert_eq!(
        list(ParentFilter::Any, &[WorkerState::Running]).await,
        slice::from_ref(&running.id)
    );
    assert_eq!(
        list(
            ParentFilter::Any,
            &[
                WorkerState::Failed,
                WorkerState::Pending,
                WorkerState::Failed
            ]
        )
        .await,
        [pending.id.clone(), failed.id.clone(), child.id.clone()]
    );
    assert_eq!(
        list(
            ParentFilter::Worker(running.id.clone()),
            &[WorkerState::Pending]
        )
        .await,
        slice::from_ref(&child.id)
    );
    assert_eq!(list(ParentFilter::Any, &[WorkerState::Killed]).await, []);
    assert_eq!(
        list(ParentFilter::Any, &[WorkerState::Completed]).await,
        slice::from_ref(&completed.id)
    );
    assert_eq!(
        list(
            ParentFilter::Any,
            &[WorkerState::Completed, WorkerState::Running]
        )
        .await,
        [running.id.clone(), completed.id.clone()]
    );
    assert_eq!(list(ParentFilter::Any, &[]).await.len(), 5);
}

pub(crate) async fn pagination_walks_every_worker_once_across_pages(store: &dyn WorkerStore) {
    let parent = create(store, None, 0).await;
    // Equal create times force the id tie-break.
    for time in [5, 5, 5, 6, 6, 7, 8] {
        create(store, Some(&parent), time).await;
    }
    let everything = store
        .list(&query(ParentFilter::Worker(parent.id.clone()), &[]))
        .await
        .unwrap();
    assert_eq!(everything.len(), 7);
    let keys: Vec<_> = everything
        .iter()
        .map(|r| (r.spec.create_time_ms, r.id.clone()))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "ordered by (create_time_ms, id)");

    let mut walked = Vec::new();
    let mut page_sizes = Vec::new();
    let mut q = ListQuery {
        limit: 3,
        ..query(ParentFilter::Worker(parent.id.clone()), &[])
    };
    loop {
        let page = store.list(&q).await.unwrap();
        page_sizes.push(page.len());
        let Some(last) = page.last() else { break };
        q.after = Some((last.spec.create_time_ms, last.id.clone()));
        walked.extend(page);
    }
    assert_eq!(page_sizes, [3, 3, 1, 0]);
    assert_eq!(walked, everything);

    let zero = ListQuery {
        limit: 0,
        ..query(ParentFilter::Any, &[])
    };
    assert_eq!(store.list(&zero).await.unwrap(), []);
}

pub(crate) async fn close_orphans_fails_open_rows_and_leaves_closed_ones(store: &dyn WorkerStore) {
    let pending = create(store, None, 1_000).await;
    let running = create(store, None, 2_000).await;
    store
        .apply(&running.id, Event::Start, Patch::default(), 2_100)
        .await
        .unwrap();
    let completed = create(store, None, 3_000).await;
    store
        .apply(&completed.id, Event::Start, Patch::default(), 3_100)
        .await
        .unwrap();
    let completed = moved(
        store
            .apply(&completed.id, Event::Complete, Patch::default(), 3_200)
            .await
            .unwrap(),
    )
    .worker;
    let killed = create(store, None, 4_000).await;
    let killed = moved(
        store
            .apply(&killed.id, Event::Kill, Patch::default(), 4_100)
            .await
            .unwrap(),
    )
    .worker;

    let closed = store.close_orphans(9_000).await.unwrap();
    assert_eq!(closed, [pending.id.clone(), running.id.clone()]);
    for (rec, sequence) in [(&pending, 2), (&running, 3)] {
        let now = store.get(&rec.id).await.unwrap().unwrap();
        assert_eq!(now.state, WorkerState::Failed);
        assert_eq!(now.error.as_deref(), Some("orphaned: service restarted"));
        assert_eq!(now.close_time_ms, Some(9_000));
        assert_eq!(now.token_hash, None);
        assert_eq!(now.sequence, sequence);
        let last = store.events_after(&rec.id, sequence - 1).await.unwrap();
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].state, WorkerState::Failed);
        assert_eq!(last[0].worker, now);
    }
    assert_eq!(store.get(&completed.id).await.unwrap(), Some(completed));
    assert_eq!(store.get(&killed.id).await.unwrap(), Some(killed));
    assert_eq!(store.close_orphans(10_000).await.unwrap(), []);
}

pub(crate) async fn duplicate_request_id_is_refused_per_caller_scope(store: &dyn WorkerStore) {
    let mut first = record(None, 1_000);
    Arc::make_mut(&mut first.spec).request_id = Some("retry-me".to_owned());
    let first = store.create(&first).await.unwrap().worker;

    let mut again = record(None, 2_000);
    Arc::make_mut(&mut again.spec).request_id = Some("retry-me".to_owned());
    let err = store.create(&again).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::DuplicateRequestId { request_id, existing }
            if request_id == "retry-me" && *existing == first.id),
        "{err:?}"
    );
    assert_eq!(
        store.get(&again.id).await.unwrap(),
        None,
        "nothing was written"
    );

    Arc::make_mut(&mut again.spec).caller_scope = "alice".to_owned();
    store.create(&again).await.unwrap();
    assert_eq!(
        store
            .find_by_request_id("anonymous", "retry-me")
            .await
            .unwrap(),
        Some(first)
    );
    assert_eq!(
        store
            .find_by_request_id("alice", "retry-me")
            .await
            .unwrap()
            .map(|r| r.id),
        Some(again.id)
    );
    assert_eq!(
        store.find_by_request_id("bob", "retry-me").await.unwrap(),
        None
    );

    // Workers without a request_id never collide.
    create(store, None, 3_000).await;
    create(store, None, 3_000).await;
}

pub(crate) async fn token_lookup_stops_once_the_worker_is_terminal(store: &dyn WorkerStore) {
    let token = generate_token();
    let mut rec = record(None, 1_000);
    rec.token_hash = Some(hash_token(&token));
    let rec = store.create(&rec).await.unwrap().worker;
    let hash = hash_token(&token);
    let find = || async { store.find_by_token_hash(&hash).await.unwrap() };

    assert_eq!(find().await.map(|r| r.id), Some(rec.id.clone()));
    store
        .apply(&rec.id, Event::Start, Patch::default(), 1_100)
        .await
        .unwrap();
    assert_eq!(find().await.map(|r| r.state), Some(WorkerState::Running));
    store
        .apply(&rec.id, Event::Complete, Patch::default(), 1_200)
        .await
        .unwrap();
    assert_eq!(find().await, None);
    assert_eq!(
        store
            .find_by_token_hash(&hash_token("other"))
            .await
            .unwrap(),
        None
    );
}

pub(crate) async fn a_parent_must_exist(store: &dyn WorkerStore) {
    let ghost = record(None, 0);
    let orphan = record(Some(&ghost), 1_000);
    assert!(
        store.create(&orphan).await.is_err(),
        "a parent that does not exist"
    );
    assert_eq!(store.get(&orphan.id).await.unwrap(), None);
}

pub(crate) async fn concurrent_callers_each_see_consistent_runs(store: &dyn WorkerStore) {
    let runs = (0..4).map(|t| async move {
        for i in 0..25 {
            let rec = create(store, None, t * 1_000 + i).await;
            store
                .apply(&rec.id, Event::Start, Patch::default(), 1)
                .await
                .unwrap();
            store
                .apply(&rec.id, Event::Complete, Patch::default(), 2)
                .await
                .unwrap();
        }
    });
    join_all(runs).await;
    let done = store
        .list(&ListQuery {
            limit: 1_000,
            ..query(ParentFilter::Any, &[WorkerState::Completed])
        })
        .await
        .unwrap();
    assert_eq!(done.len(), 100);
    assert!(done.iter().all(|r| r.sequence == 3));
}

pub(crate) async fn artifacts_are_assembled_on_the_row_and_bounded(store: &dyn WorkerStore) {
    let rec = create(store, None, 1_000).await;
    store
        .apply(&rec.id, Event::Start, Patch::default(), 1_100)
        .await
        .unwrap();
    let chunk = |json: String| Progress {
        kind: ProgressKind::Artifact,
        text: String::new(),
        data_json: Some(json),
    };
    store
        .append_progress(
            &rec.id,
            chunk(r#"{"artifact_id": "a", "name": "n", "parts": [{"text": "1"}]}"#.into()),
            1_200,
            100,
        )
        .await
        .unwrap();
    let ev = store
        .append_progress(
            &rec.id,
            chunk(r#"{"artifact_id": "a", "parts": [{"text": "2"}], "append": true}"#.into()),
            1_300,
            100,
        )
        .await
        .unwrap();
    let stored = store.get(&rec.id).await.unwrap().unwrap();
    assert_eq!(stored.artifacts, ev.worker.artifacts);
    let all = crate::workers::artifacts::assembled(stored.artifacts.as_deref());
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].parts.len(), 2);
    // Over the bound: refused, the row and the log unchanged.
    let big = "x".repeat(crate::workers::artifacts::MAX_ARTIFACT_BYTES);
    let err = store
        .append_progress(
            &rec.id,
            chunk(format!(
                r#"{{"artifact_id": "b", "parts": [{{"text": "{big}"}}]}}"#
            )),
            1_400,
            100,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::ArtifactsTooLarge { .. }),
        "{err:?}"
    );
    let after = store.get(&rec.id).await.unwrap().unwrap();
    assert_eq!(after.artifacts, stored.artifacts);
    assert_eq!(after.sequence, stored.sequence);
    // A transition keeps them.
    store
        .apply(&rec.id, Event::Complete, Patch::default(), 1_500)
        .await
        .unwrap();
    let done = store.get(&rec.id).await.unwrap().unwrap();
    assert_eq!(done.artifacts, stored.artifacts);
}

pub(crate) async fn progress_is_an_event_between_transitions(store: &dyn WorkerStore) {
    let rec = create(store, None, 1_000).await;
    let report = |text: &str| Progress {
        kind: ProgressKind::ToolCall,
        text: text.to_owned(),
        data_json: Some(r#"{"tool":"grep"}"#.to_owned()),
    };
    // Not running yet: refused, nothing written.
    let err = store
        .append_progress(&rec.id, report("early"), 1_050, 100)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NotRunning {
                state: WorkerState::Pending,
                ..
            }
        ),
        "{err:?}"
    );
    store
        .apply(&rec.id, Event::Start, Patch::default(), 1_100)
        .await
        .unwrap();
    let p = store
        .append_progress(&rec.id, report("grep config"), 1_200, 4)
        .await
        .unwrap();
    assert_eq!((p.sequence, p.state), (3, WorkerState::Running));
    assert_eq!(p.progress, Some(report("grep config")));
    assert_eq!(p.worker.last_activity_ms, 1_200);
    assert_eq!(
        store.get(&rec.id).await.unwrap().unwrap().last_activity_ms,
        1_200
    );
    store
        .append_progress(&rec.id, report("second"), 1_300, 4)
        .await
        .unwrap();
    // Four events is the bound given: the next report is refused, the transition is not.
    let err = store
        .append_progress(&rec.id, report("third"), 1_400, 4)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::TooManyEvents { max: 4, .. }),
        "{err:?}"
    );
    let done = moved(
        store
            .apply(&rec.id, Event::Complete, Patch::default(), 1_500)
            .await
            .unwrap(),
    );
    assert_eq!(done.sequence, 5);
    let events = store.events_after(&rec.id, 2).await.unwrap();
    let seen: Vec<_> = events
        .iter()
        .map(|e| {
            (
                e.sequence,
                e.state,
                e.progress.as_ref().map(|p| p.text.as_str()),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (3, WorkerState::Running, Some("grep config")),
            (4, WorkerState::Running, Some("second")),
            (5, WorkerState::Completed, None),
        ]
    );
    assert_eq!(events[0].worker.last_activity_ms, 1_200);
    let err = store
        .append_progress(&rec.id, report("late"), 1_600, 100)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotRunning { .. }), "{err:?}");
    let err = store
        .append_progress(&WorkerId::generate(), report("nobody"), 1_600, 100)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
}

pub(crate) async fn list_filters_by_caller_scope(store: &dyn WorkerStore) {
    let mut alice = record(None, 1_000);
    Arc::make_mut(&mut alice.spec).caller_scope = "alice".to_owned();
    let alice = store.create(&alice).await.unwrap().worker;
    let mut bob = record(None, 2_000);
    Arc::make_mut(&mut bob.spec).caller_scope = "bob".to_owned();
    let bob = store.create(&bob).await.unwrap().worker;
    let scoped = |scope: &'static str| ListQuery {
        caller_scope: Some(scope.to_owned()),
        context_id: None,
        agent: None,
        newest_first: false,
        ..query(ParentFilter::Any, &[])
    };
    assert_eq!(
        ids(&store.list(&scoped("alice")).await.unwrap()),
        slice::from_ref(&alice.id)
    );
    assert_eq!(
        ids(&store.list(&scoped("bob")).await.unwrap()),
        slice::from_ref(&bob.id)
    );
    assert_eq!(store.list(&scoped("carol")).await.unwrap(), []);
    assert_eq!(
        ids(&store.list(&query(ParentFilter::Any, &[])).await.unwrap()),
        [alice.id, bob.id]
    );
}

pub(crate) async fn a_replica_s_own_rows_are_never_remote(store: Arc<dyn WorkerStore>) {
    use super::Lease;
    store.ping().await.unwrap();
    // A store nobody else shares has no replica duties to check.
    let Some(shared) = store.clone().shared() else {
        return;
    };
    assert_eq!(shared.renew_lease().await.unwrap(), Lease::Renewed);
    let rec = create(&*store, None, 1_000).await;
    // This process owns the run: a stop is its own to carry out, never a request to itself.
    assert!(!shared.request_stop(&rec.id, "stop it").await.unwrap());
    assert!(
        !shared
            .request_stop(&WorkerId::generate(), "nobody")
            .await
            .unwrap()
    );
    assert_eq!(shared.stop_requests().await.unwrap(), []);
    // A fresh key is claimed by whoever asks first; the claim can be released.
    let ttl = std::time::Duration::from_secs(60);
    assert_eq!(shared.claim_dedupe("k1", &rec.id, ttl).await.unwrap(), None);
    shared.release_dedupe("k1", &rec.id).await.unwrap();
    let other = create(&*store, None, 2_000).await;
    assert_eq!(
        shared.claim_dedupe("k1", &other.id, ttl).await.unwrap(),
        None
    );
}

/// `apply_from` given the row as it was before another write moved it: the write against the
/// stale record must miss, and the transition be decided on the row as stored.
pub(crate) async fn a_transition_from_a_stale_record_is_decided_on_the_row(
    store: &dyn WorkerStore,
) {
    let pending = create(store, None, 1_000).await;
    // Known and current: written without surprises.
    let running = moved(
        store
            .apply_from(&pending, Event::Start, Patch::default(), 1_100)
            .await
            .unwrap(),
    );
    assert_eq!((running.sequence, running.state), (2, WorkerState::Running));
    // Stale (still pending): a progress report moved the row on, so the Start decided on the
    // stale record would be a second start; the row says running, and Complete moves it.
    let progressed = store
        .append_progress(
            &pending.id,
            Progress {
                kind: ProgressKind::ToolCall,
                text: "halfway".to_owned(),
                data_json: None,
            },
            1_150,
            100,
        )
        .await
        .unwrap();
    assert_eq!(progressed.sequence, 3);
    let done = moved(
        store
            .apply_from(&pending, Event::Complete, Patch::default(), 1_200)
            .await
            .unwrap(),
    );
    assert_eq!((done.sequence, done.state), (4, WorkerState::Completed));
    assert_eq!(
        done.worker.start_time_ms,
        Some(1_100),
        "decided on the stored row"
    );
    // Stale, and finished on the row: a kill is the row's refusal (not cancelable), not a
    // second ending decided on the record that still says running.
    let err = store
        .apply_from(&running.worker, Event::Kill, Patch::default(), 1_300)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Illegal(IllegalTransition::NotCancelable {
                state: WorkerState::Completed
            })
        ),
        "{err:?}"
    );
    // Stale with an event the row refuses: the row's refusal, not the record's.
    let err = store
        .apply_from(&pending, Event::Start, Patch::default(), 1_400)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Illegal(_)), "{err:?}");
    let events = store.events_after(&pending.id, 0).await.unwrap();
    let seqs: Vec<(u64, WorkerState)> = events.iter().map(|e| (e.sequence, e.state)).collect();
    assert_eq!(
        seqs,
        [
            (1, WorkerState::Pending),
            (2, WorkerState::Running),
            (3, WorkerState::Running),
            (4, WorkerState::Completed)
        ]
    );
}

/// A start and the end that followed it, written together: both events are stored and
/// answered, in order and at their own times, exactly as if written one by one; many of them at
/// once each get their own; a row that moved since (a progress report, a kill) is decided on
/// the row as it is.
pub(crate) async fn a_start_written_with_its_end_keeps_both_events(store: &dyn WorkerStore) {
    let pending = create(store, None, 1_000).await;
    let patch = Patch {
        result: Some("done".to_owned()),
        exit_code: Some(0),
        ..Patch::default()
    };
    let (start, end) = store
        .apply_started(&pending, 1_100, Event::Complete, patch, 1_200)
        .await
        .unwrap();
    let start = start.expect("the start is answered");
    let end = moved(end);
    assert_eq!(
        (start.sequence, start.state, start.time_ms),
        (2, WorkerState::Running, 1_100)
    );
    assert_eq!(start.worker.start_time_ms, Some(1_100));
    assert!(start.worker.token_hash.is_some());
    assert_eq!(
        (end.sequence, end.state, end.time_ms),
        (3, WorkerState::Completed, 1_200)
    );
    assert_eq!(
        (end.worker.start_time_ms, end.worker.close_time_ms),
        (Some(1_100), Some(1_200))
    );
    assert_eq!(end.worker.result.as_deref(), Some("done"));
    assert_eq!(end.worker.token_hash, None);
    assert_eq!(
        store.get(&pending.id).await.unwrap(),
        Some(end.worker.clone())
    );
    let stored = store.events_after(&pending.id, 1).await.unwrap();
    assert_eq!(stored, vec![start, end]);

    // Many at once: each its own pair, whatever the backend writes together.
    let many: Vec<WorkerRecord> = join_all((0..24).map(|i| create(store, None, 2_000 + i))).await;
    let answers = join_all(many.iter().enumerate().map(|(i, w)| {
        let end = if i % 2 == 0 {
            Event::Complete
        } else {
            Event::Fail
        };
        store.apply_started(w, 3_000, end, Patch::default(), 3_001)
    }))
    .await;
    for (i, (w, answer)) in many.iter().zip(answers).enumerate() {
        let (start, end) = answer.unwrap();
        assert_eq!(
            start.map(|s| (s.sequence, s.state)),
            Some((2, WorkerState::Running))
        );
        let want = if i % 2 == 0 {
            WorkerState::Completed
        } else {
            WorkerState::Failed
        };
        assert_eq!(moved(end).state, want);
        let states: Vec<WorkerState> = store
            .events_after(&w.id, 0)
            .await
            .unwrap()
            .iter()
            .map(|e| e.state)
            .collect();
        assert_eq!(states, [WorkerState::Pending, WorkerState::Running, want]);
    }

    // The row moved since the record: a progress report cannot (only a running worker
    // reports), but a stop can — killed while pending, the end is the row's: absorbed.
    let stopped = create(store, None, 4_000).await;
    moved(
        store
            .apply(&stopped.id, Event::Kill, Patch::default(), 4_100)
            .await
            .unwrap(),
    );
    let (start, end) = store
        .apply_started(&stopped, 4_200, Event::Kill, Patch::default(), 4_300)
        .await
        .unwrap();
    assert!(start.is_none(), "{start:?}");
    assert!(
        matches!(end, Applied::Absorbed(ref w) if w.state == WorkerState::Killed),
        "{end:?}"
    );
    // Started elsewhere meanwhile (the record still says pending): only the end is written.
    let elsewhere = create(store, None, 5_000).await;
    moved(
        store
            .apply(&elsewhere.id, Event::Start, Patch::default(), 5_100)
            .await
            .unwrap(),
    );
    let (start, end) = store
        .apply_started(&elsewhere, 5_200, Event::Complete, Patch::default(), 5_300)
        .await
        .unwrap();
    assert!(start.is_none(), "{start:?}");
    let end = moved(end);
    assert_eq!((end.sequence, end.worker.start_time_ms), (3, Some(5_100)));
}

/// Many creates and transitions at once (a backend may write them in one statement): each
/// caller gets its own answer, a request_id taken twice among them is refused for exactly one,
/// and every row and event is as if written alone.
pub(crate) async fn writes_made_together_each_get_their_own_answer(store: &dyn WorkerStore) {
    let n = 40;
    let records: Vec<WorkerRecord> = (0..n).map(|i| record(None, 5_000 + i)).collect();
    let mut twins = [record(None, 6_000), record(None, 6_001)];
    for t in &mut twins {
        let mut spec = (*t.spec).clone();
        spec.request_id = Some("same-request".to_owned());
        t.spec = Arc::new(spec);
    }
    let creates = records.iter().chain(twins.iter()).map(|r| store.create(r));
    let mut created = Vec::new();
    let mut refused = Vec::new();
    for outcome in join_all(creates).await {
        match outcome {
            Ok(ev) => created.push(ev.worker),
            Err(StoreError::DuplicateRequestId { request_id, .. }) => refused.push(request_id),
            Err(e) => panic!("create failed: {e:?}"),
        }
    }
    assert_eq!(refused, ["same-request"], "exactly one twin refused");
    assert_eq!(created.len(), records.len() + 1);
    // Every worker started at once, then half completed and half failed at once.
    let starts = created
        .iter()
        .map(|w| store.apply_from(w, Event::Start, Patch::default(), 7_000));
    let running: Vec<WorkerRecord> = join_all(starts)
        .await
        .into_iter()
        .map(|a| moved(a.unwrap()).worker)
        .collect();
    let ends = running.iter().enumerate().map(|(i, w)| {
        let (event, patch) = if i % 2 == 0 {
            (
                Event::Complete,
                Patch {
                    result: Some(format!("result {i}")),
                    ..Patch::default()
                },
            )
        } else {
            (
                Event::Fail,
                Patch {
                    error: Some(format!("error {i}")),
                    ..Patch::default()
                },
            )
        };
        store.apply_from(w, event, patch, 8_000)
    });
    let ended: Vec<WorkerEvent> = join_all(ends)
        .await
        .into_iter()
        .map(|a| moved(a.unwrap()))
        .collect();
    for (i, ev) in ended.iter().enumerate() {
        let stored = store.get(&ev.worker_id).await.unwrap().unwrap();
        assert_eq!(stored.sequence, 3);
        assert_eq!(stored, ev.worker, "the answer is the row as stored");
        if i % 2 == 0 {
            assert_eq!(stored.state, WorkerState::Completed);
            assert_eq!(
                stored.result.as_deref(),
                Some(format!("result {i}").as_str())
            );
        } else {
            assert_eq!(stored.state, WorkerState::Failed);
            assert_eq!(stored.error.as_deref(), Some(format!("error {i}").as_str()));
        }
        let events = store.events_after(&ev.worker_id, 0).await.unwrap();
        assert_eq!(events.len(), 3, "one event per write for {}", ev.worker_id);
    }
}

fn message(worker: &WorkerRecord, text: &str, request_id: Option<&str>) -> super::Message {
    super::Message {
        id: super::Message::new_id(),
        worker_id: worker.id.clone(),
        text: text.to_owned(),
        interrupt: false,
        caller_scope: "anonymous".to_owned(),
        request_id: request_id.map(str::to_owned),
        time_ms: 5_000,
    }
}

/// docs §12.2, §12.3: messages queue in order, a request id answers with its message, the
/// inbox is bounded, the seal closes it, a continuation takes the undelivered ones, and a
/// transcript reads back as written.
pub(crate) async fn the_inbox_its_seal_continuations_and_transcripts(store: &dyn WorkerStore) {
    use super::{Continued, Sent, StoreError};
    let w = create(store, None, 1_000).await;
    store
        .apply(&w.id, Event::Start, Patch::default(), 2_000)
        .await
        .unwrap();
    let one = message(&w, "one", Some("k1"));
    let Sent::Queued(rec) = store.send_message(&one, 2).await.unwrap() else {
        panic!("not queued")
    };
    assert_eq!(rec.undelivered, 1);
    let again = message(&w, "one", Some("k1"));
    assert_eq!(
        store.send_message(&again, 2).await.unwrap(),
        Sent::Duplicate(one.clone())
    );
    assert_eq!(
        store.find_message("anonymous", "k1").await.unwrap(),
        Some(one.clone())
    );
    let two = message(&w, "two", None);
    assert!(matches!(
        store.send_message(&two, 2).await.unwrap(),
        Sent::Queued(_)
    ));
    assert!(matches!(
        store.send_message(&message(&w, "three", None), 2).await,
        Err(StoreError::InboxFull { max: 2, .. })
    ));
    assert_eq!(store.get(&w.id).await.unwrap().unwrap().undelivered, 2);
    let taken = store.take_messages(&w.id, false).await.unwrap();
    assert_eq!(taken, [one, two]);
    assert_eq!(store.get(&w.id).await.unwrap().unwrap().undelivered, 0);
    assert_eq!(store.take_messages(&w.id, false).await.unwrap(), []);

    // The seal: nothing to take, so later sends find the inbox closed.
    assert_eq!(store.take_messages(&w.id, true).await.unwrap(), []);
    let late = message(&w, "late", None);
    assert!(matches!(
        store.send_message(&late, 2).await.unwrap(),
        Sent::Closed(_)
    ));

    store
        .append_transcript(&w.id, 0, &["a".to_owned(), "b".to_owned()])
        .await
        .unwrap();
    store
        .append_transcript(&w.id, 2, &["c".to_owned()])
        .await
        .unwrap();
    assert_eq!(store.transcript(&w.id).await.unwrap(), ["a", "b", "c"]);
    store
        .apply(&w.id, Event::Complete, Patch::default(), 3_000)
        .await
        .unwrap();

    // A continuation: linked both ways, with the message in its inbox.
    let mut next = record(None, 4_000);
    Arc::make_mut(&mut next.spec).continues = Some(w.id.clone());
    let mut first = message(&w, "more", None);
    first.worker_id = next.id.clone();
    let Continued::Created(ev) = store.continue_worker(&w.id, &next, &first).await.unwrap() else {
        panic!("not created")
    };
    assert_eq!(ev.worker.spec.continues, Some(w.id.clone()));
    assert_eq!(ev.worker.undelivered, 1);
    let stored = store.get(&next.id).await.unwrap().unwrap();
    assert_eq!(stored.spec.continues, Some(w.id.clone()));
    assert_eq!(stored.undelivered, 1);
    assert_eq!(
        store.get(&w.id).await.unwrap().unwrap().continued_by,
        Some(next.id.clone())
    );
    let other = record(None, 4_001);
    assert_eq!(
        store.continue_worker(&w.id, &other, &first).await.unwrap(),
        Continued::Already(next.id.clone())
    );
    assert_eq!(store.get(&other.id).await.unwrap(), None);
    assert_eq!(store.take_messages(&next.id, false).await.unwrap(), [first]);

    // Transcripts of workers that ended before the cut are deleted.
    assert_eq!(store.prune_transcripts(3_001).await.unwrap(), 1);
    assert_eq!(store.transcript(&w.id).await.unwrap(), Vec::<String>::new());
}

/// docs §12.4: `input_required` keeps the token (the worker answers as itself), is not an
/// orphan, and the answer runs it again with a new token.
pub(crate) async fn a_worker_that_asks_keeps_its_token_and_is_not_an_orphan(
    store: &dyn WorkerStore,
) {
    let w = create(store, None, 1_000).await;
    store
        .apply(&w.id, Event::Start, Patch::default(), 2_000)
        .await
        .unwrap();
    let patch = Patch {
        question: Some("which one?".to_owned()),
        ..Patch::default()
    };
    let asked = moved(store.apply(&w.id, Event::Ask, patch, 3_000).await.unwrap());
    assert_eq!(asked.state, WorkerState::InputRequired);
    assert_eq!(asked.worker.question.as_deref(), Some("which one?"));
    let hash = asked.worker.token_hash.clone().unwrap();
    assert_eq!(
        store.find_by_token_hash(&hash).await.unwrap().map(|r| r.id),
        Some(w.id.clone())
    );
    assert!(!store.open_workers().await.unwrap().contains(&w.id));
    let events = store.events_after(&w.id, 2).await.unwrap();
    assert_eq!(events[0].worker.question.as_deref(), Some("which one?"));
    let patch = Patch {
        token_hash: Some("ab".repeat(32)),
        ..Patch::default()
    };
    let answered = moved(
        store
            .apply(&w.id, Event::Answer, patch, 4_000)
            .await
            .unwrap(),
    );
    assert_eq!(answered.state, WorkerState::Running);
    assert_eq!(answered.worker.question, None);
    assert_eq!(answered.worker.start_time_ms, Some(2_000));
    assert_eq!(answered.worker.token_hash, Some("ab".repeat(32)));
    assert_eq!(store.get(&w.id).await.unwrap(), Some(answered.worker));
}
