//! Runners across replicas (docs §10): the waits of runner workers published for the runners of
//! every replica, the claim that takes one (`FOR UPDATE SKIP LOCKED`, the worker's token
//! rotated in the same statement), and the messages relayed between the owner and the claimer.

use std::sync::LazyLock;

use deadpool_postgres::Client;

use super::batch::{Batched, Origin, column};
use super::cached::query_opt_cached;
use super::context::PgContext;
use super::notices::{PAYLOAD_LIMIT, RELAYS_CHANNEL, WAITS_CHANNEL};
use super::rows::read_record;
use crate::workers::model::{WorkerId, WorkerRecord};
use crate::workers::store::record::COLUMNS;
use crate::workers::store::{Relayed, RunnerClaim, RunnerWait, StoreError};

/// A runner claim (`claim_runner_wait`): lock the wait unless another claimer holds it, rotate
/// the token of a worker that still waits (pending) and return its row, and claim the wait; a
/// wait whose worker no longer waits is dropped instead (PostgreSQL runs every data-modifying
/// `WITH` part to completion whether or not the outer query reads it).
static CLAIM_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH c AS (
             SELECT worker_id FROM runner_waits WHERE worker_id = $1 AND claimed_by IS NULL
             FOR UPDATE SKIP LOCKED
         ), t AS (
             UPDATE workers w SET token_hash = $2 FROM c
              WHERE w.id = c.worker_id AND w.state = 'pending'
             RETURNING {COLUMNS}
         ), stale AS (
             DELETE FROM runner_waits r USING c
              WHERE r.worker_id = c.worker_id AND NOT EXISTS (SELECT 1 FROM t)
         ), k AS (
             UPDATE runner_waits r SET claimed_by = $3 FROM t
              WHERE r.worker_id = t.id
             RETURNING 1
         )
         SELECT {COLUMNS} FROM t WHERE EXISTS (SELECT 1 FROM k)"
    )
});

/// Messages relayed together (`relay`, group commit): rows numbered in the order given (`seq`
/// is taken row by row as the ordered select yields them), and one notice per addressee that
/// carries its messages (`[to, [[seq, worker, message], …]]`) when that fits in a notice, else
/// only `[to]`. The waits this replica claimed whose last message is among them (`$4`) go in
/// the same statement.
static RELAY_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH gone AS (
             DELETE FROM runner_waits WHERE worker_id = ANY($4::text[]) AND claimed_by = $5
         ), sent AS (
             INSERT INTO runner_relays (to_replica, worker_id, message)
             SELECT t, w, m FROM unnest($1::text[], $2::text[], $3::text[])
                                 WITH ORDINALITY AS u(t, w, m, i) ORDER BY i
             RETURNING seq, to_replica, worker_id, message
         ), whole AS (
             SELECT to_replica, json_build_array(to_replica,
                        json_agg(json_build_array(seq, worker_id, message) ORDER BY seq))::text AS p
               FROM sent GROUP BY to_replica
         )
         SELECT pg_notify('{RELAYS_CHANNEL}', CASE WHEN octet_length(p) < {PAYLOAD_LIMIT}
                                                 THEN p ELSE json_build_array(to_replica)::text END)
           FROM whole"
    )
});

/// Messages about one worker for one replica, as the batch writer takes them
/// (`SharedStore::relay`): with `withdraw`, the last ones, and the wait this replica claimed
/// goes with them.
#[derive(Debug)]
pub(super) struct RelayWrite {
    pub to: String,
    pub worker: WorkerId,
    pub messages: Vec<String>,
    pub withdraw: bool,
}

impl Batched for RelayWrite {
    const CONTEXT: &'static str = "relay runner messages";
    fn row(&self) -> &str {
        self.worker.as_str()
    }
    async fn write_all(
        c: &Client,
        origin: &Origin,
        batch: &[Self],
    ) -> Result<Vec<bool>, tokio_postgres::Error> {
        let (mut to, mut worker, mut message) = (Vec::new(), Vec::new(), Vec::new());
        for r in batch {
            for m in &r.messages {
                to.push(r.to.as_str());
                worker.push(r.worker.as_str());
                message.push(m.as_str());
            }
        }
        let gone: Vec<&str> = batch
            .iter()
            .filter(|r| r.withdraw)
            .map(|r| r.worker.as_str())
            .collect();
        // Carried by the notice, the messages need no read by their addressee.
        let statement = c.prepare_cached(&RELAY_SQL).await?;
        c.execute(
            &statement,
            &[&to, &worker, &message, &gone, &origin.id.as_ref()],
        )
        .await?;
        Ok(vec![true; batch.len()])
    }
}

/// A published runner wait as the batch writer takes it (`SharedStore::publish_runner_wait`).
#[derive(Debug)]
pub(super) struct PublishWrite(pub RunnerWait);

/// Runner waits published together, all of this replica's (`$2`): each inserted (one already
/// there is left as it is), and one notice for the statement that carries them (`[[worker,
/// owner, agent, principal, deadline_ms], …]`) so a replica whose runners can take them claims
/// without reading the table; when they do not fit in a notice it carries `[]` (read the
/// waits).
static PUBLISH_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH added AS (
             INSERT INTO runner_waits (worker_id, owner_replica, agent, caller_scope, deadline_ms)
             SELECT w, $2::text, a, s, d
               FROM unnest($1::text[], $3::text[], $4::text[], $5::bigint[]) AS u(w, a, s, d)
             ON CONFLICT (worker_id) DO NOTHING
             RETURNING worker_id, owner_replica, agent, caller_scope, deadline_ms
         ), whole AS (
             SELECT json_agg(json_build_array(worker_id, owner_replica, agent, caller_scope,
                                              deadline_ms))::text AS p
               FROM added HAVING count(*) > 0
         )
         SELECT pg_notify('{WAITS_CHANNEL}',
                          CASE WHEN octet_length(p) < {PAYLOAD_LIMIT} THEN p ELSE '[]' END)
           FROM whole"
    )
});

impl Batched for PublishWrite {
    const CONTEXT: &'static str = "publish a runner wait";
    fn row(&self) -> &str {
        self.0.worker_id.as_str()
    }
    async fn write_all(
        c: &Client,
        origin: &Origin,
        batch: &[Self],
    ) -> Result<Vec<bool>, tokio_postgres::Error> {
        // Only the owner publishes its workers' waits.
        debug_assert!(batch.iter().all(|w| *w.0.owner == *origin.id));
        let worker = column(batch, |w| w.0.worker_id.as_str());
        let owner: &str = &origin.id;
        let agent = column(batch, |w| w.0.agent.as_str());
        let scope = column(batch, |w| w.0.caller_scope.as_str());
        let deadline = column(batch, |w| w.0.deadline_ms);
        let statement = c.prepare_cached(&PUBLISH_SQL).await?;
        c.execute(&statement, &[&worker, &owner, &agent, &scope, &deadline])
            .await?;
        // A wait already there is the same wait: published either way.
        Ok(vec![true; batch.len()])
    }
}

/// The wait of a worker whose run ended, deleted claimed or not (`SharedStore::
/// unpublish_runner_wait`), as the batch writer takes it.
#[derive(Debug)]
pub(super) struct UnpublishWrite(pub WorkerId);

impl Batched for UnpublishWrite {
    const CONTEXT: &'static str = "withdraw a runner wait";
    fn row(&self) -> &str {
        self.0.as_str()
    }
    async fn write_all(
        c: &Client,
        _origin: &Origin,
        batch: &[Self],
    ) -> Result<Vec<bool>, tokio_postgres::Error> {
        let worker = column(batch, |w| w.0.as_str());
        let statement = c
            .prepare_cached("DELETE FROM runner_waits WHERE worker_id = ANY($1::text[])")
            .await?;
        c.execute(&statement, &[&worker]).await?;
        // A wait already gone (the claimer's last relay withdrew it) is withdrawn all the same.
        Ok(vec![true; batch.len()])
    }
}

/// Unclaimed waits of live replicas, oldest first (`SharedStore::runner_waits`).
pub(super) async fn waits(client: &Client, limit: i64) -> Result<Vec<RunnerWait>, StoreError> {
    let rows = client
        .query(
            "SELECT w.worker_id, w.owner_replica, w.agent, w.caller_scope, w.deadline_ms
                   FROM runner_waits w JOIN replicas r ON r.id = w.owner_replica
                  WHERE w.claimed_by IS NULL AND r.expires_at > now()
                  ORDER BY w.waiting_since, w.worker_id LIMIT $1",
            &[&limit],
        )
        .await
        .pg("read runner waits")?;
    rows.iter()
        .map(|row| {
            Ok(RunnerWait {
                worker_id: WorkerId::parse(row.get::<_, &str>(0))
                    .map_err(|e| StoreError::Corrupt(format!("runner wait: {e}")))?,
                owner: row.get(1),
                agent: row.get(2),
                caller_scope: row.get(3),
                deadline_ms: row.get(4),
            })
        })
        .collect()
}

/// Claims a wait for replica `replica_id`, rotating the worker's token hash
/// (`SharedStore::claim_runner_wait`).
pub(super) async fn claim_wait(
    client: &Client,
    replica_id: &str,
    id: &WorkerId,
    token_hash: &str,
) -> Result<Option<WorkerRecord>, StoreError> {
    // One statement, one commit ([`CLAIM_SQL`]).
    let row = query_opt_cached(
        client,
        &CLAIM_SQL,
        &[&id.as_str(), &token_hash, &replica_id],
    )
    .await
    .pg("claim a runner wait")?;
    row.as_ref().map(read_record).transpose()
}

/// Deletes the wait of worker `id` if no replica claimed it (`SharedStore::
/// withdraw_unclaimed_wait`); whether one was deleted.
pub(super) async fn withdraw_unclaimed(client: &Client, id: &WorkerId) -> Result<bool, StoreError> {
    let n = client
        .execute(
            "DELETE FROM runner_waits WHERE worker_id = $1 AND claimed_by IS NULL",
            &[&id.as_str()],
        )
        .await
        .pg("withdraw a runner wait")?;
    Ok(n > 0)
}

/// Who claimed the wait of worker `id` (`SharedStore::runner_claim`).
pub(super) async fn claim_of(client: &Client, id: &WorkerId) -> Result<RunnerClaim, StoreError> {
    let row = client
        .query_opt(
            "SELECT w.claimed_by, COALESCE(r.expires_at > now(), false)
                   FROM runner_waits w LEFT JOIN replicas r ON r.id = w.claimed_by
                  WHERE w.worker_id = $1",
            &[&id.as_str()],
        )
        .await
        .pg("read a runner claim")?;
    Ok(match row {
        None => RunnerClaim::NoWait,
        Some(row) => match row.get::<_, Option<String>>(0) {
            None => RunnerClaim::Unclaimed,
            Some(by) => RunnerClaim::Claimed {
                by,
                live: row.get::<_, bool>(1),
            },
        },
    })
}

/// Takes the messages sent to replica `replica_id`, returning in order those not `applied`
/// (`SharedStore::take_relays`): the owner's notices bring most of them, so a take under load
/// deletes about a second of rows and sends back only the few a notice missed.
pub(super) async fn take_relays(
    client: &Client,
    replica_id: &str,
    applied: &[i64],
) -> Result<Vec<Relayed>, StoreError> {
    let rows = client
        .query(
            "WITH gone AS (
                 DELETE FROM runner_relays WHERE to_replica = $1
                 RETURNING seq, worker_id, message
             )
             SELECT seq, worker_id, message FROM gone
              WHERE NOT EXISTS (SELECT 1 FROM unnest($2::bigint[]) AS a(seq)
                                 WHERE a.seq = gone.seq)",
            &[&replica_id, &applied],
        )
        .await
        .pg("take relayed runner messages")?;
    let mut out: Vec<Relayed> = rows
        .iter()
        .filter_map(|row| {
            Some(Relayed {
                seq: row.get(0),
                worker_id: WorkerId::parse(row.get::<_, &str>(1)).ok()?,
                message: row.get(2),
            })
        })
        .collect();
    out.sort_by_key(|r| r.seq);
    Ok(out)
}
