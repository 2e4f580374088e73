//! Throw-away PostgreSQL databases for tests: `AGENTRY_TEST_POSTGRES_URL` names a server (and a
//! database to connect to for administration); each test gets its own `agentry_test_<random>`
//! database, dropped when the guard goes. Without the variable, PostgreSQL tests are skipped
//! and say so once; under `CI=true` a missing variable fails them instead.

use std::sync::Once;

/// The variable that enables PostgreSQL tests.
pub const VAR: &str = "AGENTRY_TEST_POSTGRES_URL";

/// A database that exists until this guard is dropped.
pub struct TestDb {
    /// URL of the test database itself.
    pub url: String,
    admin_url: String,
    name: String,
}

/// Replaces the database name (the path) of a `postgres://` URL.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

impl TestDb {
    /// A fresh database, or `None` (after printing the skip line once) when the variable is
    /// unset — a failure under `CI=true`. With the variable set, a server that cannot be
    /// reached fails the test.
    pub async fn create() -> Option<TestDb> {
        let Ok(admin_url) = std::env::var(VAR) else {
            // CI must run them: a missing database there is a failure, never a skip.
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{VAR} must be set under CI=true"
            );
            static SKIPPED: Once = Once::new();
            SKIPPED.call_once(|| {
                use std::io::Write;
                // Straight to the process's stderr: the test harness captures `eprintln!`.
                let _ = writeln!(
                    std::io::stderr(),
                    "PostgreSQL tests skipped: {VAR} is not set"
                );
            });
            return None;
        };
        let name = format!(
            "agentry_test_{}",
            &crate::workers::model::generate_token()[..16]
        );
        let (client, connection) = tokio_postgres::connect(&admin_url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("{VAR}: cannot connect: {e}"));
        let pump = tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("create test database {name}: {e}"));
        drop(client);
        let _ = pump.await;
        Some(TestDb {
            url: with_database(&admin_url, &name),
            admin_url,
            name,
        })
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin_url.clone(), self.name.clone());
        // Drop runs inside the test's runtime, which cannot be blocked on: use a thread with
        // its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                if let Ok((client, connection)) =
                    tokio_postgres::connect(&admin, tokio_postgres::NoTls).await
                {
                    let pump = tokio::spawn(connection);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                    drop(client);
                    let _ = pump.await;
                }
            });
        })
        .join();
    }
}
