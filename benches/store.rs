//! Worker-store throughput beside its baseline (`cargo bench --bench store`).
//!
//! Measures, each on a fresh file in a temporary directory: `N` calls to `SqliteStore::create`,
//! `N` full lifecycles (create + start + complete), and the baseline — `N` raw rusqlite
//! single-row INSERTs of a row the size of a worker record into a plain table with the same
//! pragmas (WAL, synchronous=NORMAL), each in its own transaction. The ratio says what the
//! store's extra work (event row, indexes, checks, the read before each transition) costs.
//! Plain `std::time::Instant`; no harness.

// The allocator `agentry serve` runs on (src/main.rs), so what is measured here allocates as
// the service does; the baselines measured in this process run on it too.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::Path;
use std::time::{Duration, Instant};

use agentry::workers::lifecycle::Event;
use agentry::workers::model::WorkerRecord;
use agentry::workers::store::{Patch, SqliteStore, WorkerStore};
use rusqlite::{Connection, Transaction, TransactionBehavior, params};

#[path = "support/record.rs"]
mod support_record;
use support_record::record;

/// Operations per measurement.
const N: usize = 5_000;

/// Operations per second.
fn rate(n: usize, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64()
}

/// Times `N` creates on a fresh store, one after another.
async fn bench_create(path: &Path, records: &[WorkerRecord]) -> Duration {
    let store = SqliteStore::open(path).expect("open store");
    let start = Instant::now();
    for rec in records {
        store.create(rec).await.expect("create");
    }
    start.elapsed()
}

/// One create + start + complete run.
async fn lifecycle(store: &SqliteStore, i: usize, rec: &WorkerRecord) {
    let now = rec.spec.create_time_ms;
    store.create(rec).await.expect("create");
    store
        .apply(&rec.id, Event::Start, Patch::default(), now + 1)
        .await
        .expect("start");
    let done = Patch {
        result: Some(format!("done {i}")),
        exit_code: Some(0),
        ..Patch::default()
    };
    store
        .apply(&rec.id, Event::Complete, done, now + 2)
        .await
        .expect("complete");
}

/// Times `N` create + start + complete runs on a fresh store, `concurrency` at a time (the
/// writer thread groups what arrives together into one commit).
async fn bench_lifecycle(path: &Path, records: &[WorkerRecord], concurrency: usize) -> Duration {
    let store = std::sync::Arc::new(SqliteStore::open(path).expect("open store"));
    let records = std::sync::Arc::new(records.to_vec());
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (store, records, next) = (store.clone(), records.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(rec) = records.get(i) else { break };
                    lifecycle(&store, i, rec).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    start.elapsed()
}

/// Times `N` single-row INSERTs, one IMMEDIATE transaction each (as the store uses), into a plain
/// table with the store's pragmas.
fn bench_raw(path: &Path, payloads: &[(String, String)]) -> Duration {
    let mut conn = Connection::open(path).expect("open raw");
    conn.busy_timeout(Duration::from_secs(5)).expect("busy");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("wal");
    conn.pragma_update(None, "synchronous", "NORMAL")
        .expect("synchronous");
    conn.execute_batch("CREATE TABLE raw (id TEXT NOT NULL PRIMARY KEY, payload TEXT NOT NULL)")
        .expect("create table");
    let start = Instant::now();
    for (id, payload) in payloads {
        let tx = Transaction::new(&mut conn, TransactionBehavior::Immediate).expect("begin");
        tx.prepare_cached("INSERT INTO raw (id, payload) VALUES (?1, ?2)")
            .and_then(|mut stmt| stmt.execute(params![id, payload]))
            .expect("insert");
        tx.commit().expect("commit");
    }
    start.elapsed()
}

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let create_records: Vec<_> = (0..N).map(record).collect();
    let lifecycle_records: Vec<_> = (0..N).map(record).collect();
    let concurrent_records: Vec<_> = (0..N).map(record).collect();
    let payloads: Vec<_> = (0..N)
        .map(|i| {
            let rec = record(i);
            // A payload the size of the record's fields (its debug form is close to its JSON).
            let payload = format!("{rec:?}");
            (rec.id.to_string(), payload)
        })
        .collect();
    let row_bytes = payloads[0].1.len();

    let raw = bench_raw(&dir.path().join("raw.db"), &payloads);
    let create = rt.block_on(bench_create(&dir.path().join("create.db"), &create_records));
    let lifecycle = rt.block_on(bench_lifecycle(
        &dir.path().join("lifecycle.db"),
        &lifecycle_records,
        1,
    ));
    let concurrent = rt.block_on(bench_lifecycle(
        &dir.path().join("concurrent.db"),
        &concurrent_records,
        32,
    ));

    let raw_rate = rate(N, raw);
    let create_rate = rate(N, create);
    let lifecycle_rate = rate(N, lifecycle);
    let lifecycle_txn_rate = rate(3 * N, lifecycle);
    let concurrent_rate = rate(N, concurrent);
    println!(
        "worker store, N = {N}, row ≈ {row_bytes} bytes, SQLite {}, WAL + synchronous=NORMAL",
        rusqlite::version()
    );
    println!(
        "baseline  raw INSERT, 1 row per txn  {raw_rate:>9.0} rows/s        ({:.1} µs each)",
        raw.as_secs_f64() * 1e6 / N as f64
    );
    println!(
        "store     create, one at a time      {create_rate:>9.0} workers/s     ({:.1} µs each)  \
         ratio to baseline {:.2}",
        create.as_secs_f64() * 1e6 / N as f64,
        create_rate / raw_rate
    );
    println!(
        "store     create+start+complete      {lifecycle_rate:>9.0} lifecycles/s  \
         ({lifecycle_txn_rate:.0} writes/s)  write ratio to baseline {:.2}",
        lifecycle_txn_rate / raw_rate
    );
    println!(
        "store     same, 32 concurrent        {concurrent_rate:>9.0} lifecycles/s  \
         ({:.0} writes/s, group commit)  write ratio to baseline {:.2}",
        rate(3 * N, concurrent),
        rate(3 * N, concurrent) / raw_rate
    );
}
