//! A replica's duties towards the others sharing its store (docs §9): renew its lease every
//! `replica.lease / 3` on the database clock, sweep the orphans of replicas whose lease expired,
//! and carry out the stop requests other replicas recorded on its own rows.
//!
//! Everything here is driven by the store: the database decides who is lost (its `now()`
//! against the lease) and which sweeper closes a row (a compare-and-set), so running this on
//! every replica at once is safe. Notices only make it react sooner; the periodic tick is what
//! guarantees progress. Runs only for shared stores; SQLite keeps its start-up close.

use std::{collections::HashSet, sync::Arc, sync::Mutex, time::Duration};

use tokio::sync::broadcast::error::RecvError;

use super::{
    model::WorkerId,
    store::{Lease, Notice, SharedStore},
    supervisor::{Supervisor, Visibility, now_ms},
};

/// The slowest the sweeper and the stop poll may tick, whatever the lease.
const MAX_TICK: Duration = Duration::from_secs(1);

/// Starts the replica task on the supervisor's task tracker; it ends with the service.
pub fn start(sup: &Arc<Supervisor>, lease: Duration) {
    let Some(store) = sup.shared_store().cloned() else {
        return;
    };
    let sup = sup.clone();
    let tasks = sup.task_tracker();
    tasks.spawn(run(sup, store, lease));
}

async fn run(sup: Arc<Supervisor>, store: Arc<dyn SharedStore>, lease: Duration) {
    let shutdown = sup.shutdown_token();
    let renew_every = lease / 3;
    let period = renew_every.min(MAX_TICK);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut notices = Some(store.notices());
    let mut last_renewal = tokio::time::Instant::now();
    // Workers whose stop this task already started, so a request seen again (the poll and the
    // notice) is not stopped twice.
    let stopping: Arc<Mutex<HashSet<WorkerId>>> = Arc::default();
    loop {
        let notice = tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => None,
            n = async {
                match notices.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => Some(n),
        };
        match notice {
            // Another replica asked this one to stop a worker: look at the requests now.
            Some(Ok(Notice::Stop { .. })) => {
                carry_out_stops(&sup, &*store, &stopping).await;
                continue;
            }
            // Hold notices may have been missed: recount every run here, then the stops.
            Some(Ok(Notice::Resync) | Err(RecvError::Lagged(_))) => {
                for id in sup.live_ids() {
                    sup.sync_remote_holds(&id).await;
                }
                carry_out_stops(&sup, &*store, &stopping).await;
                continue;
            }
            // A caller of another replica began or ended waiting for a worker.
            Some(Ok(Notice::Holds { worker_id })) => {
                let sup = sup.clone();
                tokio::spawn(async move { sup.sync_remote_holds(&worker_id).await });
                continue;
            }
            // An event of a worker that may run here, committed by another replica (a
            // progress report sent there): its watchers here must see it. This replica's own
            // commits were published as they were made (the notice can arrive before the
            // live record has moved on, and must not cost a read).
            Some(Ok(Notice::Event {
                worker_id,
                sequence,
                by_this_replica,
            })) => {
                if !by_this_replica && sup.is_behind(&worker_id, sequence) {
                    let sup = sup.clone();
                    tokio::spawn(async move { sup.catch_up(&worker_id, sequence).await });
                }
                continue;
            }
            Some(Err(RecvError::Closed)) => {
                notices = None;
                continue;
            }
            None => {}
        }
        // Half a tick of slack: a tick fires a little less than `renew_every` after the last
        // renewal ended, and skipping it would stretch the interval to two ticks.
        if last_renewal.elapsed() + period / 2 >= renew_every {
            let started = tokio::time::Instant::now();
            match store.renew_lease().await {
                Ok(Lease::Renewed) => last_renewal = started,
                Ok(Lease::Lapsed) => {
                    last_renewal = started;
                    tracing::error!(
                        "this replica's lease had expired before it was renewed; other replicas \
                         may have closed its workers as orphans"
                    );
                    stop_swept(&sup).await;
                }
                // Health reports the database; the lease is retried on the next tick.
                Err(e) => tracing::warn!(error = %e, "cannot renew the replica lease"),
            }
        }
        sweep(&sup).await;
        if let Err(e) = store.prune_holds().await {
            tracing::warn!(error = %e, "cannot prune the holds of lost replicas");
        }
        carry_out_stops(&sup, &*store, &stopping).await;
    }
}

/// Kills what lost replicas left on this host, then closes their rows (each exactly once,
/// whichever replica's sweeper gets there first).
async fn sweep(sup: &Supervisor) {
    let store = sup.store();
    let orphans = match store.open_workers().await {
        Ok(ids) => ids,
        Err(e) => {
            tracing::warn!(error = %e, "orphan sweep: cannot read open workers");
            return;
        }
    };
    if orphans.is_empty() {
        return;
    }
    sup.reap_leftovers(&orphans);
    match store.close_orphans(now_ms()).await {
        Ok(closed) if !closed.is_empty() => {
            let ids: Vec<&str> = closed.iter().map(WorkerId::as_str).collect();
            tracing::warn!(count = closed.len(), workers = ?ids, "closed workers of a lost replica");
            sup.finish_orphan_worktrees(&closed).await;
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "orphan sweep failed"),
    }
}

/// After a lapsed lease: the local runs whose rows another replica's sweeper already closed
/// have no row to report to any more, so their processes are stopped rather than left running
/// behind a terminal row (docs §8.2: no process outlives its worker).
async fn stop_swept(sup: &Arc<Supervisor>) {
    for id in sup.live_ids() {
        match sup.store().get(&id).await {
            Ok(Some(rec)) if rec.state.is_terminal() => {
                tracing::warn!(worker = %id, state = %rec.state, "stopping a run whose row was closed while this replica's lease had lapsed");
                let _ = sup.stop(&id, "replica lease lost", &Visibility::All).await;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(worker = %id, error = %e, "cannot check a run after a lapsed lease");
            }
        }
    }
}

/// Stops every worker of this replica that another replica asked to stop.
async fn carry_out_stops(
    sup: &Arc<Supervisor>,
    store: &dyn SharedStore,
    stopping: &Arc<Mutex<HashSet<WorkerId>>>,
) {
    let requests = match store.stop_requests().await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read stop requests");
            return;
        }
    };
    for (id, reason) in requests {
        if !stopping
            .lock()
            .expect("stopping poisoned")
            .insert(id.clone())
        {
            continue;
        }
        let (sup, stopping) = (sup.clone(), stopping.clone());
        tokio::spawn(async move {
            tracing::info!(worker = %id, reason = %reason, "stopping a worker at another replica's request");
            if let Err(e) = sup.stop(&id, &reason, &Visibility::All).await {
                tracing::warn!(worker = %id, error = %e, "requested stop failed");
            }
            stopping.lock().expect("stopping poisoned").remove(&id);
        });
    }
}
