//! What an executor's outcome means for the worker (docs/workers.md §6.2): the terminal event
//! and what is recorded with it. Pure, so every row of the table is tested without running
//! anything.

use super::Summarise;
use crate::workers::{executor::Outcome, lifecycle::Event, store::Patch};

/// What a completed run's stdout must satisfy or becomes.
#[derive(Clone)]
pub enum OutputRule {
    /// Recorded as it is.
    Plain,
    /// Must be JSON valid against this schema (the effective output schema); the parsed value
    /// is the structured result, anything else fails the worker.
    Schema(serde_json::Value),
    /// Summarised into the structured result, never refused (the review gate records its
    /// decision this way instead of enforcing the reviewer's schema).
    Summarise(Summarise),
}

/// The terminal event and patch of an outcome. `kill_reason` says why a killed worker was
/// stopped (asked only for a kill).
pub fn settle(
    outcome: Outcome,
    rule: &OutputRule,
    kill_reason: impl FnOnce() -> String,
) -> (Event, Patch) {
    match outcome {
        Outcome::Completed { stdout } => completed(stdout, rule),
        Outcome::Failed {
            exit_code,
            stderr_tail,
            reason,
            ..
        } => (
            Event::Fail,
            Patch {
                error: Some(with_stderr(reason, &stderr_tail)),
                exit_code,
                ..Patch::default()
            },
        ),
        Outcome::TimedOut { after, stderr_tail } => (
            Event::Fail,
            Patch {
                error: Some(with_stderr(
                    format!("timed out after {}", humantime::format_duration(after)),
                    &stderr_tail,
                )),
                ..Patch::default()
            },
        ),
        Outcome::Killed => (
            Event::Kill,
            Patch {
                error: Some(kill_reason()),
                ..Patch::default()
            },
        ),
        Outcome::Asked { question } => (
            Event::Ask,
            Patch {
                question: Some(question),
                ..Patch::default()
            },
        ),
        Outcome::Rejected { reason } => (
            Event::Fail,
            Patch {
                error: Some(format!("rejected: {reason}")),
                rejected: true,
                ..Patch::default()
            },
        ),
        Outcome::CouldNotStart { reason } => (
            Event::Fail,
            Patch {
                error: Some(reason),
                ..Patch::default()
            },
        ),
    }
}

/// A run that exited 0 (or a runner that reported success).
fn completed(stdout: String, rule: &OutputRule) -> (Event, Patch) {
    match rule {
        OutputRule::Plain => (
            Event::Complete,
            Patch {
                result: Some(stdout),
                exit_code: Some(0),
                ..Patch::default()
            },
        ),
        OutputRule::Summarise(summarise) => (
            Event::Complete,
            Patch {
                structured_result: Some(summarise(&stdout).to_string()),
                result: Some(stdout),
                exit_code: Some(0),
                ..Patch::default()
            },
        ),
        OutputRule::Schema(schema) => match crate::schema::validate_output(schema, &stdout) {
            Ok(v) => (
                Event::Complete,
                Patch {
                    structured_result: Some(v.to_string()),
                    result: Some(stdout),
                    ..Patch::default()
                },
            ),
            Err(e) => (
                Event::Fail,
                Patch {
                    result: Some(stdout),
                    error: Some(e),
                    exit_code: Some(0),
                    ..Patch::default()
                },
            ),
        },
    }
}

/// `reason`, followed by the tail of stderr when there is one.
fn with_stderr(reason: String, stderr_tail: &str) -> String {
    let tail = stderr_tail.trim_end();
    if tail.trim().is_empty() {
        reason
    } else {
        format!("{reason}; stderr: {tail}")
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use serde_json::json;

    use super::*;

    fn completed(s: &str) -> Outcome {
        Outcome::Completed {
            stdout: s.to_owned(),
        }
    }

    #[test]
    fn every_outcome_maps_to_its_event_and_record() {
        let schema = OutputRule::Schema(json!({
            "type": "object",
            "required": ["ok"],
            "properties": {"ok": {"type": "boolean"}}
        }));
        let summarise = OutputRule::Summarise(Arc::new(|s: &str| json!({"len": s.len()})));
        struct Row {
            name: &'static str,
            outcome: Outcome,
            rule: OutputRule,
            event: Event,
            result: Option<&'static str>,
            structured: Option<&'static str>,
            error: Option<&'static str>,
            exit_code: Option<i32>,
        }
        let rows = vec![
            Row {
                name: "plain completion keeps stdout and exit 0",
                outcome: completed("hello\n"),
                rule: OutputRule::Plain,
                event: Event::Complete,
                result: Some("hello\n"),
                structured: None,
                error: None,
                exit_code: Some(0),
            },
            Row {
                name: "schema-valid output becomes the structured result",
                outcome: completed("{\"ok\": true}"),
                rule: schema.clone(),
                event: Event::Complete,
                result: Some("{\"ok\": true}"),
                structured: Some("{\"ok\":true}"),
                error: None,
                exit_code: None,
            },
            Row {
                name: "schema-invalid output fails, keeping stdout",
                outcome: completed("{\"ok\": 3}"),
                rule: schema.clone(),
                event: Event::Fail,
                result: Some("{\"ok\": 3}"),
                structured: None,
                error: Some("output"),
                exit_code: Some(0),
            },
            Row {
                name: "non-JSON output fails under a schema",
                outcome: completed("not json"),
                rule: schema,
                event: Event::Fail,
                result: Some("not json"),
                structured: None,
                error: Some("JSON"),
                exit_code: Some(0),
            },
            Row {
                name: "a summarised run is never refused",
                outcome: completed("abc"),
                rule: summarise,
                event: Event::Complete,
                result: Some("abc"),
                structured: Some("{\"len\":3}"),
                error: None,
                exit_code: Some(0),
            },
            Row {
                name: "a failure says why and shows stderr",
                outcome: Outcome::Failed {
                    exit_code: Some(3),
                    stderr_tail: "boom\n".into(),
                    reason: "exited with status 3".into(),
                    signal: None,
                },
                rule: OutputRule::Plain,
                event: Event::Fail,
                result: None,
                structured: None,
                error: Some("exited with status 3; stderr: boom"),
                exit_code: Some(3),
            },
            Row {
                name: "a failure without stderr is only the reason",
                outcome: Outcome::Failed {
                    exit_code: None,
                    stderr_tail: "  \n".into(),
                    reason: "killed by signal 9".into(),
                    signal: Some(9),
                },
                rule: OutputRule::Plain,
                event: Event::Fail,
                result: None,
                structured: None,
                error: Some("killed by signal 9"),
                exit_code: None,
            },
            Row {
                name: "a timeout names the bound",
                outcome: Outcome::TimedOut {
                    after: Duration::from_secs(90),
                    stderr_tail: "slow".into(),
                },
                rule: OutputRule::Plain,
                event: Event::Fail,
                result: None,
                structured: None,
                error: Some("timed out after 1m 30s; stderr: slow"),
                exit_code: None,
            },
            Row {
                name: "a kill records the stop reason",
                outcome: Outcome::Killed,
                rule: OutputRule::Plain,
                event: Event::Kill,
                result: None,
                structured: None,
                error: Some("killed: stopped by StopWorker"),
                exit_code: None,
            },
            Row {
                name: "a run that could not start fails with the reason",
                outcome: Outcome::CouldNotStart {
                    reason: "executor.command /nope: not found".into(),
                },
                rule: OutputRule::Plain,
                event: Event::Fail,
                result: None,
                structured: None,
                error: Some("executor.command /nope: not found"),
                exit_code: None,
            },
        ];
        for r in rows {
            let (event, patch) = settle(r.outcome, &r.rule, || {
                "killed: stopped by StopWorker".to_owned()
            });
            assert_eq!(event, r.event, "{}", r.name);
            assert_eq!(patch.result.as_deref(), r.result, "{}", r.name);
            assert_eq!(
                patch.structured_result.as_deref(),
                r.structured,
                "{}",
                r.name
            );
            match (r.error, &patch.error) {
                (None, None) => {}
                (Some(want), Some(got)) => assert!(got.contains(want), "{}: {got}", r.name),
                (want, got) => panic!("{}: error {got:?}, want {want:?}", r.name),
            }
            assert_eq!(patch.exit_code, r.exit_code, "{}", r.name);
        }
    }
}
