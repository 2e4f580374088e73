//! Conversations on SQLite (docs §12): the inbox (`worker_messages`), its seal, continuations
//! and transcripts, as statements run inside the caller's transaction or read connection.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::context::Context;
use super::rows::{insert_event, insert_worker, select_worker};
use crate::workers::model::{WorkerId, WorkerRecord};
use crate::workers::store::record::creation_event;
use crate::workers::store::{Continued, Message, Sent, StoreError};

/// The columns of `worker_messages`, in the order [`read_message`] decodes them.
const MESSAGE_COLUMNS: &str = "id, worker_id, text, interrupt, caller_scope, request_id, time_ms";

fn read_message(row: &Row<'_>) -> rusqlite::Result<Message> {
    Ok(Message {
        id: row.get(0)?,
        worker_id: row.get(1)?,
        text: row.get(2)?,
        interrupt: row.get(3)?,
        caller_scope: row.get(4)?,
        request_id: row.get(5)?,
        time_ms: row.get(6)?,
    })
}

/// The message a caller sent with this idempotency key.
pub(super) fn find_message(
    conn: &Connection,
    caller_scope: &str,
    request_id: &str,
) -> Result<Option<Message>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM worker_messages WHERE caller_scope = ?1 AND request_id = ?2"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(params![caller_scope, request_id], read_message)
            .optional()
    })
    .context("find message by request_id")
}

fn insert_message(tx: &Connection, msg: &Message) -> Result<(), StoreError> {
    tx.prepare_cached(&format!(
        "INSERT INTO worker_messages ({MESSAGE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
    ))
    .and_then(|mut stmt| {
        stmt.execute(params![
            msg.id,
            msg.worker_id,
            msg.text,
            msg.interrupt,
            msg.caller_scope,
            msg.request_id,
            msg.time_ms,
        ])
    })
    .context("insert message")?;
    Ok(())
}

/// The body of `send_message`.
pub(super) fn send_in(tx: &Connection, msg: &Message, inbox_max: u32) -> Result<Sent, StoreError> {
    if let Some(rid) = &msg.request_id
        && let Some(existing) = find_message(tx, &msg.caller_scope, rid)?
    {
        return Ok(Sent::Duplicate(existing));
    }
    let id = &msg.worker_id;
    let worker = select_worker(tx, id)?.ok_or_else(|| StoreError::NotFound(id.clone()))?;
    let sealed: bool = tx
        .prepare_cached("SELECT sealed FROM workers WHERE id = ?1")
        .and_then(|mut stmt| stmt.query_row([id], |row| row.get(0)))
        .context("read the inbox seal")?;
    if worker.state.is_terminal() || sealed {
        return Ok(Sent::Closed(worker));
    }
    if worker.undelivered >= inbox_max {
        return Err(StoreError::InboxFull {
            id: id.clone(),
            max: inbox_max,
        });
    }
    insert_message(tx, msg)?;
    tx.prepare_cached("UPDATE workers SET undelivered = undelivered + 1 WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute([id]))
        .context("count the message")?;
    let mut worker = worker;
    worker.undelivered += 1;
    Ok(Sent::Queued(worker))
}

/// The body of `take_messages`.
pub(super) fn take_in(
    tx: &Connection,
    id: &WorkerId,
    seal: bool,
) -> Result<Vec<Message>, StoreError> {
    let taken = tx
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM worker_messages
              WHERE worker_id = ?1 AND delivered = 0 ORDER BY seq"
        ))
        .and_then(|mut stmt| {
            stmt.query_map([id], read_message)?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .context("read the inbox")?;
    if !taken.is_empty() {
        tx.prepare_cached(
            "UPDATE worker_messages SET delivered = 1 WHERE worker_id = ?1 AND delivered = 0",
        )
        .and_then(|mut stmt| stmt.execute([id]))
        .context("mark messages delivered")?;
    }
    let sealing = seal && taken.is_empty();
    tx.prepare_cached("UPDATE workers SET undelivered = 0, sealed = (sealed OR ?2) WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute(params![id, sealing]))
        .context("empty the inbox")?;
    Ok(taken)
}

/// The body of `continue_worker`.
pub(super) fn continue_in(
    tx: &Connection,
    old: &WorkerId,
    new: &WorkerRecord,
    msg: &Message,
) -> Result<Continued, StoreError> {
    let previous = select_worker(tx, old)?.ok_or_else(|| StoreError::NotFound(old.clone()))?;
    if let Some(next) = previous.continued_by {
        return Ok(Continued::Already(next));
    }
    let mut event = creation_event(new);
    let moved = tx
        .prepare_cached(
            "UPDATE worker_messages SET worker_id = ?2 WHERE worker_id = ?1 AND delivered = 0",
        )
        .and_then(|mut stmt| stmt.execute(params![old, new.id]))
        .context("move undelivered messages")?;
    event.worker.undelivered = u32::try_from(moved).unwrap_or(u32::MAX).saturating_add(1);
    insert_worker(tx, &event.worker)?;
    insert_event(tx, &event)?;
    insert_message(tx, msg)?;
    tx.prepare_cached("UPDATE workers SET continued_by = ?2, undelivered = 0 WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute(params![old, new.id]))
        .context("link the continuation")?;
    Ok(Continued::Created(Box::new(event)))
}

/// The body of `append_transcript`.
pub(super) fn append_transcript_in(
    tx: &Connection,
    id: &WorkerId,
    from: u32,
    entries: &[String],
) -> Result<(), StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "INSERT OR REPLACE INTO worker_transcripts (worker_id, idx, entry) VALUES (?1, ?2, ?3)",
        )
        .context("append transcript")?;
    for (i, entry) in entries.iter().enumerate() {
        let idx = i64::from(from) + i as i64;
        stmt.execute(params![id, idx, entry])
            .context("append transcript")?;
    }
    Ok(())
}

/// The transcript of a worker, in order.
pub(super) fn transcript(conn: &Connection, id: &WorkerId) -> Result<Vec<String>, StoreError> {
    conn.prepare_cached("SELECT entry FROM worker_transcripts WHERE worker_id = ?1 ORDER BY idx")
        .and_then(|mut stmt| {
            stmt.query_map([id], |row| row.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()
        })
        .context("read transcript")
}

/// The body of `prune_transcripts`.
pub(super) fn prune_transcripts_in(
    tx: &Connection,
    closed_before_ms: i64,
) -> Result<u64, StoreError> {
    let workers: i64 = tx
        .query_row(
            "SELECT COUNT(DISTINCT t.worker_id) FROM worker_transcripts t
               JOIN workers w ON w.id = t.worker_id
              WHERE w.close_time_ms < ?1",
            [closed_before_ms],
            |row| row.get(0),
        )
        .context("count expired transcripts")?;
    if workers > 0 {
        tx.execute(
            "DELETE FROM worker_transcripts WHERE worker_id IN
                 (SELECT id FROM workers WHERE close_time_ms < ?1)",
            [closed_before_ms],
        )
        .context("delete expired transcripts")?;
    }
    Ok(u64::try_from(workers).unwrap_or(0))
}
