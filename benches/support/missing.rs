//! What a benchmark does when something it needs is not there: on a developer's machine it says
//! so and measures nothing of that part; under `CI=true` (as `.ci/run` runs it) it fails, so a
//! missing dependency never passes as a skip. Shared by `#[path]`.

/// Reports that `what` is missing (and what it would have measured): a panic under `CI=true`,
/// else a line saying the rows are skipped.
pub fn missing(what: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what}; under CI=true this fails instead of skipping (.ci/run provides it)");
    }
    println!("skipped: {what}");
}
