//! Conversations on PostgreSQL (docs §12): the inbox (`worker_messages`), its seal,
//! continuations and transcripts. Each write is one transaction that locks the worker's row
//! first, so a send, a seal and a terminal transition of the same worker never interleave.

use deadpool_postgres::{Client, GenericClient};
use tokio_postgres::Row;

use super::context::PgContext;
use super::rows::{EventRow, select_worker};
use crate::workers::model::{WorkerId, WorkerRecord};
use crate::workers::store::record::creation_event;
use crate::workers::store::{Continued, Message, Sent, StoreError};

/// The columns of `worker_messages`, in the order [`read_message`] decodes them.
const MESSAGE_COLUMNS: &str = "id, worker_id, text, interrupt, caller_scope, request_id, time_ms";

fn read_message(row: &Row) -> Result<Message, StoreError> {
    let corrupt = |e: tokio_postgres::Error| StoreError::Corrupt(format!("message row: {e}"));
    let worker: &str = row.try_get(1).map_err(corrupt)?;
    Ok(Message {
        id: row.try_get(0).map_err(corrupt)?,
        worker_id: WorkerId::parse(worker)
            .map_err(|e| StoreError::Corrupt(format!("message row: {e}")))?,
        text: row.try_get(2).map_err(corrupt)?,
        interrupt: row.try_get(3).map_err(corrupt)?,
        caller_scope: row.try_get(4).map_err(corrupt)?,
        request_id: row.try_get(5).map_err(corrupt)?,
        time_ms: row.try_get(6).map_err(corrupt)?,
    })
}

/// The message a caller sent with this idempotency key.
pub(super) async fn find_message(
    c: &impl GenericClient,
    caller_scope: &str,
    request_id: &str,
) -> Result<Option<Message>, StoreError> {
    let row = c
        .query_opt(
            &format!(
                "SELECT {MESSAGE_COLUMNS} FROM worker_messages
                  WHERE caller_scope = $1 AND request_id = $2"
            ),
            &[&caller_scope, &request_id],
        )
        .await
        .pg("find message by request_id")?;
    row.as_ref().map(read_message).transpose()
}

async fn insert_message(c: &impl GenericClient, msg: &Message) -> Result<(), StoreError> {
    c.execute(
        &format!(
            "INSERT INTO worker_messages ({MESSAGE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
        ),
        &[
            &msg.id,
            &msg.worker_id.as_str(),
            &msg.text,
            &msg.interrupt,
            &msg.caller_scope,
            &msg.request_id,
            &msg.time_ms,
        ],
    )
    .await
    .pg("insert message")?;
    Ok(())
}

/// `send_message`.
pub(super) async fn send(
    client: &mut Client,
    msg: &Message,
    inbox_max: u32,
) -> Result<Sent, StoreError> {
    let tx = client.transaction().await.pg("send a message: begin")?;
    if let Some(rid) = &msg.request_id
        && let Some(existing) = find_message(&tx, &msg.caller_scope, rid).await?
    {
        return Ok(Sent::Duplicate(existing));
    }
    let id = &msg.worker_id;
    let mut worker = select_worker(&tx, id, true)
        .await?
        .ok_or_else(|| StoreError::NotFound(id.clone()))?;
    let sealed: bool = tx
        .query_one("SELECT sealed FROM workers WHERE id = $1", &[&id.as_str()])
        .await
        .pg("read the inbox seal")?
        .get(0);
    if worker.state.is_terminal() || sealed {
        return Ok(Sent::Closed(worker));
    }
    if worker.undelivered >= inbox_max {
        return Err(StoreError::InboxFull {
            id: id.clone(),
            max: inbox_max,
        });
    }
    insert_message(&tx, msg).await?;
    tx.execute(
        "UPDATE workers SET undelivered = undelivered + 1 WHERE id = $1",
        &[&id.as_str()],
    )
    .await
    .pg("count the message")?;
    tx.commit().await.pg("send a message: commit")?;
    worker.undelivered += 1;
    Ok(Sent::Queued(worker))
}

/// `take_messages`.
pub(super) async fn take(
    client: &mut Client,
    id: &WorkerId,
    seal: bool,
) -> Result<Vec<Message>, StoreError> {
    let tx = client.transaction().await.pg("take messages: begin")?;
    // The row lock orders this against a send and a transition of the same worker.
    tx.execute(
        "SELECT 1 FROM workers WHERE id = $1 FOR UPDATE",
        &[&id.as_str()],
    )
    .await
    .pg("lock the worker")?;
    let rows = tx
        .query(
            &format!(
                "UPDATE worker_messages SET delivered = true
                  WHERE worker_id = $1 AND NOT delivered
                 RETURNING {MESSAGE_COLUMNS}, seq"
            ),
            &[&id.as_str()],
        )
        .await
        .pg("take messages")?;
    let mut taken: Vec<(i64, Message)> = rows
        .iter()
        .map(|row| {
            Ok((
                row.try_get::<_, i64>(7)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                read_message(row)?,
            ))
        })
        .collect::<Result<_, StoreError>>()?;
    taken.sort_by_key(|(seq, _)| *seq);
    let sealing = seal && taken.is_empty();
    tx.execute(
        "UPDATE workers SET undelivered = 0, sealed = (sealed OR $2) WHERE id = $1",
        &[&id.as_str(), &sealing],
    )
    .await
    .pg("empty the inbox")?;
    tx.commit().await.pg("take messages: commit")?;
    Ok(taken.into_iter().map(|(_, m)| m).collect())
}

/// `continue_worker`.
pub(super) async fn continue_worker(
    client: &mut Client,
    origin: &str,
    old: &WorkerId,
    new: &WorkerRecord,
    msg: &Message,
) -> Result<Continued, StoreError> {
    let tx = client.transaction().await.pg("continue a worker: begin")?;
    let previous = select_worker(&tx, old, true)
        .await?
        .ok_or_else(|| StoreError::NotFound(old.clone()))?;
    if let Some(next) = previous.continued_by {
        return Ok(Continued::Already(next));
    }
    let mut event = creation_event(new);
    let moved = tx
        .execute(
            "UPDATE worker_messages SET worker_id = $2 WHERE worker_id = $1 AND NOT delivered",
            &[&old.as_str(), &new.id.as_str()],
        )
        .await
        .pg("move undelivered messages")?;
    event.worker.undelivered = u32::try_from(moved).unwrap_or(u32::MAX).saturating_add(1);
    let w = &event.worker;
    let effective = serde_json::to_string(&w.spec.effective)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode effective agent: {e}")))?;
    tx.execute(
        "INSERT INTO workers (id, agent, description, prompt, workspace, parent_id, depth, state,
                              sequence, create_time_ms, caller_scope, request_id, token_hash,
                              effective, last_activity_ms, worktree, replica_id, continues,
                              undelivered, context_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', 1, $8, $9, $10, $11, $12, $13, $14, $15,
                 $16, $17, $18)",
        &[
            &w.id.as_str(),
            &w.spec.agent,
            &w.spec.description,
            &w.spec.prompt,
            &w.spec.workspace,
            &w.spec.parent_id.as_ref().map(WorkerId::as_str),
            &i64::from(w.spec.depth),
            &w.spec.create_time_ms,
            &w.spec.caller_scope,
            &w.spec.request_id,
            &w.token_hash,
            &effective,
            &w.last_activity_ms,
            &w.worktree,
            &origin,
            &old.as_str(),
            &i64::from(w.undelivered),
            &w.spec.context_id,
        ],
    )
    .await
    .pg("insert the continuation")?;
    let row = EventRow::of(&event, origin)?;
    let [sequence, state, time, snapshot, progress, payload] = row.params();
    tx.execute(
        "INSERT INTO worker_events (worker_id, sequence, state, time_ms, snapshot, progress)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[&w.id.as_str(), sequence, state, time, snapshot, progress],
    )
    .await
    .pg("insert the continuation's event")?;
    tx.execute("SELECT pg_notify('agentry_events', $1::TEXT)", &[payload])
        .await
        .pg("notify the continuation")?;
    insert_message(&tx, msg).await?;
    tx.execute(
        "UPDATE workers SET continued_by = $2, undelivered = 0 WHERE id = $1",
        &[&old.as_str(), &new.id.as_str()],
    )
    .await
    .pg("link the continuation")?;
    tx.commit().await.pg("continue a worker: commit")?;
    Ok(Continued::Created(Box::new(event)))
}

/// `append_transcript`.
pub(super) async fn append_transcript(
    client: &Client,
    id: &WorkerId,
    from: u32,
    entries: &[String],
) -> Result<(), StoreError> {
    let idx: Vec<i64> = (0..entries.len())
        .map(|i| i64::from(from) + i as i64)
        .collect();
    client
        .execute(
            "INSERT INTO worker_transcripts (worker_id, idx, entry)
             SELECT $1, i, e FROM unnest($2::bigint[], $3::text[]) AS t(i, e)
             ON CONFLICT (worker_id, idx) DO UPDATE SET entry = excluded.entry",
            &[&id.as_str(), &idx, &entries],
        )
        .await
        .pg("append transcript")?;
    Ok(())
}

/// `transcript`.
pub(super) async fn transcript(client: &Client, id: &WorkerId) -> Result<Vec<String>, StoreError> {
    let rows = client
        .query(
            "SELECT entry FROM worker_transcripts WHERE worker_id = $1 ORDER BY idx",
            &[&id.as_str()],
        )
        .await
        .pg("read transcript")?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// `prune_transcripts`.
pub(super) async fn prune_transcripts(
    client: &Client,
    closed_before_ms: i64,
) -> Result<u64, StoreError> {
    let row = client
        .query_one(
            "WITH d AS (
                 DELETE FROM worker_transcripts t USING workers w
                  WHERE w.id = t.worker_id AND w.close_time_ms < $1
                 RETURNING t.worker_id
             )
             SELECT COUNT(DISTINCT worker_id) FROM d",
            &[&closed_before_ms],
        )
        .await
        .pg("prune transcripts")?;
    Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}
