//! Replicas and their leases (docs §9): who this process is among the replicas, the lease it
//! renews on the database clock, the take-over of a dead predecessor on the same host, the
//! orphan sweep of rows whose replica's lease expired, and the stop requests one replica
//! records on another's rows.

use std::time::Duration;

use deadpool_postgres::Client;

use super::context::PgContext;
use super::rows::apply_in;
use crate::workers::lifecycle::Event;
use crate::workers::model::WorkerId;
#[cfg(doc)]
use crate::workers::store::SharedStore;
use crate::workers::store::{Applied, Lease, Patch, StoreError};

/// Who this process is among the replicas (`replica.name`, `replica.lease`).
#[derive(Clone, Debug)]
pub struct ReplicaSettings {
    /// Shown in orphan errors and logs; default the host name.
    pub name: String,
    /// How long the replica row stays valid without renewal.
    pub lease: Duration,
    /// How long a batch of a worker's writes may wait for others (`replica.commit_window`).
    pub commit_window: Duration,
}

/// A lease (or a claim's time to live) in whole milliseconds, as the SQL intervals take it.
pub(super) fn lease_ms(lease: Duration) -> i64 {
    i64::try_from(lease.as_millis()).unwrap_or(i64::MAX)
}

/// One attempt at [`SharedStore::renew_lease`] for replica `replica_id`.
pub(super) async fn renew(
    client: &Client,
    replica_id: &str,
    replica: &ReplicaSettings,
) -> Result<Lease, StoreError> {
    // Both sides of the comparison are the database's clock.
    let row = client
        .query_opt(
            "WITH before AS (SELECT expires_at > now() AS alive FROM replicas WHERE id = $1)
                 UPDATE replicas
                    SET renewed_at = now(),
                        expires_at = now() + $2::BIGINT * interval '1 millisecond'
                  WHERE id = $1
                 RETURNING (SELECT alive FROM before)",
            &[&replica_id, &lease_ms(replica.lease)],
        )
        .await
        .pg("renew replica lease")?;
    match row {
        Some(row) if row.get::<_, Option<bool>>(0) == Some(true) => Ok(Lease::Renewed),
        Some(_) => Ok(Lease::Lapsed),
        None => {
            // Someone removed the row: register again under the same id.
            client
                .execute(
                    "INSERT INTO replicas (id, name, expires_at)
                         VALUES ($1, $2, now() + $3::BIGINT * interval '1 millisecond')
                         ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at",
                    &[&replica_id, &replica.name, &lease_ms(replica.lease)],
                )
                .await
                .pg("register replica again")?;
            Ok(Lease::Lapsed)
        }
    }
}

/// Where this process runs: the kernel's boot id (`None` off Linux) and its pid.
pub(super) struct Host {
    /// The kernel's boot id.
    pub(super) boot_id: Option<String>,
    /// This process's id.
    pub(super) pid: i64,
}

impl Host {
    /// Where this process runs.
    pub(super) fn this() -> Self {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty());
        Self {
            boot_id,
            pid: i64::from(std::process::id()),
        }
    }

    /// Whether `pid` on this host is another live agentry process: it exists, is not this
    /// process, and runs the same program name. (A pid of a previous container's namespace may
    /// name an unrelated process here; only one that runs agentry keeps its rows.)
    fn runs_another_agentry(&self, pid: i64) -> bool {
        if pid == self.pid {
            return false;
        }
        let comm = |p: &str| std::fs::read_to_string(format!("/proc/{p}/comm")).ok();
        match (comm(&pid.to_string()), comm("self")) {
            (Some(theirs), Some(ours)) => theirs == ours,
            _ => false,
        }
    }
}

/// A replica restarting on the same host under the same `replica.name` takes over its dead
/// predecessor (docs §9): that replica's lease is ended now instead of at its expiry, so this
/// start-up kills the processes it left on this host (the supervisor's cookie sweep of open
/// rows of lost replicas) and closes its rows before serving. "Same host" is the same kernel
/// boot id; "dead" is a pid that runs no other agentry process here. A replica of the same
/// name on another host, or alive here, is left to its lease.
pub(super) async fn take_over_predecessors(
    client: &deadpool_postgres::Client,
    name: &str,
    host: &Host,
) -> Result<(), StoreError> {
    let Some(boot_id) = &host.boot_id else {
        return Ok(());
    };
    let rows = client
        .query(
            "SELECT id, pid FROM replicas
              WHERE name = $1 AND boot_id = $2 AND expires_at > now()",
            &[&name, boot_id],
        )
        .await
        .pg("find this host's earlier replicas")?;
    for row in rows {
        let id: &str = row.get(0);
        let pid: Option<i64> = row.get(1);
        if pid.is_some_and(|p| host.runs_another_agentry(p)) {
            tracing::warn!(replica = %name, replica_id = %id, pid = ?pid, "another live replica of the same name runs on this host; its workers are left to it");
            continue;
        }
        client
            .execute(
                "UPDATE replicas SET expires_at = now() - interval '1 millisecond' WHERE id = $1",
                &[&id],
            )
            .await
            .pg("end a dead predecessor's lease")?;
        tracing::warn!(replica = %name, replica_id = %id, pid = ?pid, "took over the rows of this replica's previous run on this host");
    }
    Ok(())
}

/// The open rows of replicas whose lease has expired (or whose replica row is gone), oldest
/// first, with the lost replica's name.
const ORPHANS_SQL: &str = "SELECT w.id, COALESCE(r.name, w.replica_id, 'unknown') FROM workers w
     LEFT JOIN replicas r ON r.id = w.replica_id
     WHERE w.state IN ('pending', 'running') AND (r.id IS NULL OR r.expires_at < now())
     ORDER BY w.create_time_ms, w.id";

/// Closes the orphans of lost replicas as replica `replica_id` (`WorkerStore::close_orphans`).
pub(super) async fn close_orphans(
    client: &mut Client,
    replica_id: &str,
    now_ms: i64,
) -> Result<Vec<WorkerId>, StoreError> {
    let tx = client
        .transaction()
        .await
        .pg("close orphaned workers: begin")?;
    // SKIP LOCKED: a row another sweeper (or its owner) is writing right now is left to
    // it; the state compare-and-set below closes each row exactly once anyway.
    let rows = tx
        .query(&format!("{ORPHANS_SQL} FOR UPDATE OF w SKIP LOCKED"), &[])
        .await
        .pg("find orphaned workers")?;
    let mut closed = Vec::new();
    for row in &rows {
        let id: &str = row.get(0);
        let name: &str = row.get(1);
        let id =
            WorkerId::parse(id).map_err(|e| StoreError::Corrupt(format!("worker row: id: {e}")))?;
        let patch = Patch {
            error: Some(format!("orphaned: replica {name} lost")),
            ..Patch::default()
        };
        // The row is locked and open (the lock re-checked it): this moves it to failed.
        if let Applied::Moved(_) =
            apply_in(&tx, replica_id, &id, Event::Fail, patch, now_ms).await?
        {
            closed.push(id);
        }
    }
    tx.commit().await.pg("close orphaned workers: commit")?;
    Ok(closed)
}

/// The open rows of lost replicas, oldest first (`WorkerStore::open_workers`).
pub(super) async fn open_workers(client: &Client) -> Result<Vec<WorkerId>, StoreError> {
    let rows = client
        .query(ORPHANS_SQL, &[])
        .await
        .pg("find orphaned workers")?;
    rows.iter()
        .map(|row| {
            WorkerId::parse(row.get::<_, &str>(0))
                .map_err(|e| StoreError::Corrupt(format!("worker row: id: {e}")))
        })
        .collect()
}

/// Records a stop request of replica `replica_id` on another replica's open row and notifies
/// its owner (`SharedStore::request_stop`); whether one was recorded.
pub(super) async fn request_stop(
    client: &mut Client,
    replica_id: &str,
    id: &WorkerId,
    reason: &str,
) -> Result<bool, StoreError> {
    let tx = client.transaction().await.pg("request stop: begin")?;
    let changed = tx
        .execute(
            "UPDATE workers SET stop_reason = $3
                  WHERE id = $1 AND state IN ('pending', 'running')
                    AND replica_id IS DISTINCT FROM $2",
            &[&id.as_str(), &replica_id, &reason],
        )
        .await
        .pg("request stop")?;
    if changed == 1 {
        tx.execute("SELECT pg_notify('agentry_stop', $1)", &[&id.as_str()])
            .await
            .pg("notify stop")?;
    }
    tx.commit().await.pg("request stop: commit")?;
    Ok(changed == 1)
}

/// The open rows of replica `replica_id` that others asked to stop, with the reason
/// (`SharedStore::stop_requests`).
pub(super) async fn stop_requests(
    client: &Client,
    replica_id: &str,
) -> Result<Vec<(WorkerId, String)>, StoreError> {
    let rows = client
        .query(
            "SELECT id, stop_reason FROM workers
                  WHERE replica_id = $1 AND state IN ('pending', 'running')
                    AND stop_reason IS NOT NULL",
            &[&replica_id],
        )
        .await
        .pg("read stop requests")?;
    rows.iter()
        .map(|row| {
            let id = WorkerId::parse(row.get::<_, &str>(0))
                .map_err(|e| StoreError::Corrupt(format!("worker row: id: {e}")))?;
            Ok((id, row.get::<_, String>(1)))
        })
        .collect()
}

/// The live replicas with their open workers (`SharedStore::replicas`).
pub(super) async fn replicas(
    client: &Client,
) -> Result<Vec<crate::workers::store::ReplicaInfo>, StoreError> {
    use crate::workers::store::{REPLICA_WORKERS_SHOWN, ReplicaInfo};
    let ms = |col: &str| format!("(extract(epoch FROM r.{col}) * 1000)::BIGINT");
    let sql = format!(
        "SELECT r.id, r.name, {}, {}, {},
                (SELECT count(*) FROM workers w
                  WHERE w.replica_id = r.id AND w.state IN ('pending', 'running')),
                ARRAY(SELECT w.id FROM workers w
                       WHERE w.replica_id = r.id AND w.state IN ('pending', 'running')
                       ORDER BY w.create_time_ms, w.id LIMIT $1)
           FROM replicas r
          WHERE r.expires_at > now()
          ORDER BY r.started_at, r.id",
        ms("started_at"),
        ms("renewed_at"),
        ms("expires_at")
    );
    let rows = client
        .query(&sql, &[&REPLICA_WORKERS_SHOWN])
        .await
        .pg("list replicas")?;
    Ok(rows
        .iter()
        .map(|row| ReplicaInfo {
            id: row.get(0),
            name: row.get(1),
            started_ms: row.get(2),
            renewed_ms: row.get(3),
            expires_ms: row.get(4),
            open_workers: row.get(5),
            workers: row.get(6),
        })
        .collect())
}
