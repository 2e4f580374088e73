//! The SQLite backend's tests: the suite every backend runs, and what only this backend has —
//! the start-up close of every open row, indexes for every query, reopening, schema versions,
//! the lock, panicking writes, the WAL's bound and the checkpointer.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, params_from_iter, types::Value};

use super::schema::MIGRATIONS;
use super::wal::CHECKPOINT_EVERY;
use super::writer::IDLE_FOR;
use super::*;
use crate::workers::model::WorkerState;
use crate::workers::store::{
    ListQuery, ParentFilter,
    suite::{self, create, ids, moved},
};

/// A store on a real file, in a directory that does not exist yet (so `open` must create it).
fn open_temp() -> (tempfile::TempDir, PathBuf, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state").join("agentry.db");
    let store = SqliteStore::open(&path).unwrap();
    (dir, path, store)
}

suite::store_suite!(async {
    let (dir, _path, store) = open_temp();
    Some((dir, Arc::new(store) as Arc<dyn WorkerStore>))
});

#[tokio::test]
async fn close_orphans_fails_every_open_row_of_the_file() {
    let (_dir, _path, store) = open_temp();
    suite::close_orphans_fails_open_rows_and_leaves_closed_ones(&store).await;
}

#[test]
fn every_query_uses_an_index() {
    let (_dir, path, _store) = open_temp();
    let parent = WorkerId::generate();
    let cursor = Some((5, WorkerId::generate()));
    let mut statements = Vec::new();
    for parent in [ParentFilter::Any, ParentFilter::Worker(parent)] {
        for states in [&[][..], &[WorkerState::Running], &WorkerState::ALL[..2]] {
            for after in [None, cursor.clone()] {
                for caller_scope in [None, Some("alice".to_owned())] {
                    for (context_id, newest_first) in [(None, false), (Some("ctx_1"), true)] {
                        let q = ListQuery {
                            parent: parent.clone(),
                            states: states.to_vec(),
                            caller_scope: caller_scope.clone(),
                            context_id: context_id.map(str::to_owned),
                            agent: context_id.map(|_| "task".to_owned()),
                            newest_first,
                            after: after.clone(),
                            limit: 10,
                        };
                        statements.push(list_sql(&q));
                    }
                }
            }
        }
    }
    let id = Value::Text(WorkerId::generate().to_string());
    let text = |s: &str| Value::Text(s.to_owned());
    for (sql, args) in [
        (format!("SELECT {COLUMNS} FROM workers WHERE id = ?1"), vec![id.clone()]),
        (
            format!("SELECT {COLUMNS} FROM workers WHERE parent_id = ?1 ORDER BY create_time_ms, id"),
            vec![id.clone()],
        ),
        (
            format!("SELECT {COLUMNS} FROM workers WHERE token_hash = ?1 AND state IN ('pending', 'running')"),
            vec![text("ab")],
        ),
        (
            format!("SELECT {COLUMNS} FROM workers WHERE caller_scope = ?1 AND request_id = ?2"),
            vec![text("anonymous"), text("r")],
        ),
        (
            "SELECT id FROM workers WHERE state IN ('pending', 'running') ORDER BY create_time_ms, id".to_owned(),
            vec![],
        ),
        (
            "SELECT sequence FROM worker_events WHERE worker_id = ?1 AND sequence > ?2 ORDER BY sequence".to_owned(),
            vec![id.clone(), Value::Integer(0)],
        ),
    ] {
        statements.push((sql, args));
    }
    let conn = Connection::open(&path).unwrap();
    for (sql, args) in statements {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let plan: Vec<String> = stmt
            .query_map(params_from_iter(args), |row| row.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(
            plan.iter()
                .all(|step| !step.starts_with("SCAN") || step.contains("INDEX")),
            "full scan in {sql}: {plan:?}"
        );
    }
}

#[tokio::test]
async fn data_survives_closing_and_reopening() {
    let (_dir, path, store) = open_temp();
    let parent = create(&store, None, 1_000).await;
    let child = create(&store, Some(&parent), 1_500).await;
    let started = moved(
        store
            .apply(&parent.id, Event::Start, Patch::default(), 2_000)
            .await
            .unwrap(),
    );
    let events = store.events_after(&parent.id, 0).await.unwrap();
    drop(store);

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.get(&parent.id).await.unwrap(), Some(started.worker));
    assert_eq!(store.get(&child.id).await.unwrap(), Some(child.clone()));
    assert_eq!(store.events_after(&parent.id, 0).await.unwrap(), events);
    let children = store
        .list(&ListQuery {
            parent: ParentFilter::Worker(parent.id.clone()),
            states: Vec::new(),
            caller_scope: None,
            context_id: None,
            agent: None,
            newest_first: false,
            after: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(ids(&children), [child.id]);
    let mode: String = Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "journal_mode", |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn a_newer_schema_is_refused_with_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 999)
        .unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::SchemaTooNew {
                found: 999,
                known: 11
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("version 999") && message.contains("(version 11)"),
        "{message}"
    );
}

#[test]
fn a_new_file_gets_the_latest_schema_version() {
    let (_dir, path, store) = open_temp();
    drop(store);
    let version: i64 = Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, MIGRATIONS.len() as i64);
    // Opening again applies nothing and succeeds.
    SqliteStore::open(&path).unwrap();
}

#[tokio::test]
async fn undecodable_rows_are_reported_as_corrupt() {
    let (_dir, path, store) = open_temp();
    let rec = create(&store, None, 1_000).await;
    Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE workers SET effective = 'not json' WHERE id = ?1",
            [&rec.id],
        )
        .unwrap();
    let err = store.get(&rec.id).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
}

#[test]
fn a_second_open_of_the_same_file_is_refused_naming_the_holder() {
    let (_dir, path, _store) = open_temp();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(&format!("pid {}", std::process::id())),
        "{message}"
    );
}

/// A write that inserts a worker row, then panics; the error it ends with, and the name of
/// the thread it ran on.
async fn panicking_write(store: &SqliteStore, rec: &WorkerRecord) -> (String, String) {
    let rec = rec.clone();
    let ran_on = Arc::new(Mutex::new(String::new()));
    let seen = ran_on.clone();
    let error = store
        .write("a write that panics", move |conn| {
            *seen.lock().unwrap() = std::thread::current().name().unwrap_or("").to_owned();
            insert_worker(conn, &rec)?;
            panic!("a bug in a write");
            #[allow(unreachable_code)]
            Ok(())
        })
        .await
        .unwrap_err()
        .to_string();
    let thread = ran_on.lock().unwrap().clone();
    (error, thread)
}

#[tokio::test]
async fn a_write_that_panicked_is_undone_and_the_store_writes_on() {
    let (_dir, _path, store) = open_temp();
    let message = "worker store: a write that panics: commit failed: the write panicked; \
                   nothing of it was kept";
    // In place: the store has been idle, so the write runs on its caller's thread.
    std::thread::sleep(IDLE_FOR * 2);
    let inline = suite::record(None, 1_000);
    let (error, thread) = panicking_write(&store, &inline).await;
    assert_eq!(error, message);
    assert_eq!(thread, std::thread::current().name().unwrap());
    // Queued: a commit just ended, so the write goes to the writer thread. "Just" is within
    // IDLE_FOR (200 µs): on a loaded machine this thread can be descheduled for longer between
    // the commit and the write, which then runs in place (also undone). So it is tried until
    // one went to the writer thread.
    let mut tried = Vec::new();
    let mut on_writer = false;
    while !on_writer && tried.len() < 100 {
        store.write.committed();
        let queued = suite::record(None, 2_000 + tried.len() as i64);
        let (error, thread) = panicking_write(&store, &queued).await;
        assert_eq!(error, message);
        on_writer = thread == "agentry-sqlite-writer";
        tried.push(queued);
    }
    assert!(on_writer, "no write went to the writer thread in 100 tries");
    // No row was kept; both paths write on.
    for rec in std::iter::once(&inline).chain(&tried) {
        assert_eq!(store.get(&rec.id).await.unwrap(), None);
    }
    std::thread::sleep(IDLE_FOR * 2);
    let alone = create(&store, None, 3_000).await;
    store.write.committed();
    let grouped = create(&store, None, 4_000).await;
    for rec in [&alone, &grouped] {
        assert_eq!(store.get(&rec.id).await.unwrap().unwrap().id, rec.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_wal_stays_bounded_under_a_stream_of_progress_events() {
    use crate::workers::model::{Progress, ProgressKind};
    let (_dir, path, store) = open_temp();
    let store = Arc::new(store);
    let wal = wal_path(&path);
    let mut ids = Vec::new();
    for i in 0..4 {
        let rec = create(&*store, None, 1_000 + i).await;
        store
            .apply(&rec.id, Event::Start, Patch::default(), 1_100)
            .await
            .unwrap();
        ids.push(rec.id);
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Watchers following each worker keep read snapshots open nearly all along, which is
    // what keeps a passive checkpoint from ever letting the WAL start over.
    let mut readers = Vec::new();
    for id in ids.clone() {
        let (store, done) = (store.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut last = 0;
            while !done.load(Ordering::Relaxed) {
                if let Some(ev) = store.events_after(&id, last).await.unwrap().last() {
                    last = ev.sequence;
                }
                store.get(&id).await.unwrap();
            }
        }));
    }
    let sampler = {
        let (wal, done) = (wal.clone(), done.clone());
        std::thread::spawn(move || {
            let mut max = 0;
            while !done.load(Ordering::Relaxed) {
                max = max.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
                std::thread::sleep(Duration::from_millis(5));
            }
            max
        })
    };
    // About 160 MB of progress text, from four writers at once.
    let text = "x".repeat(60 * 1024);
    let writers: Vec<_> = ids
        .iter()
        .cloned()
        .map(|id| {
            let (store, text) = (store.clone(), text.clone());
            tokio::spawn(async move {
                for n in 0..650 {
                    let p = Progress {
                        kind: ProgressKind::Text,
                        text: text.clone(),
                        data_json: None,
                    };
                    store
                        .append_progress(&id, p, 2_000 + n, 100_000)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }
    let max = sampler.join().unwrap();
    eprintln!("largest WAL seen: {max} bytes");
    assert!(
        max <= WAL_LIMIT,
        "the WAL reached {max} bytes; the bound is {WAL_LIMIT}"
    );
}

#[tokio::test]
async fn the_checkpointer_copies_the_wal_back_into_the_file() {
    let (_dir, path, store) = open_temp();
    let size = || std::fs::metadata(&path).unwrap().len();
    let before = size();
    // The write connection never checkpoints: only the checkpointer, nudged every
    // CHECKPOINT_EVERY commits, makes the file itself grow.
    for i in 0..CHECKPOINT_EVERY {
        create(&store, None, 1_000 + i64::from(i)).await;
    }
    let grew = (0..250).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        size() > before
    });
    assert!(grew, "the file stayed at {before} bytes");
}
