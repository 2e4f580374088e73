//! The review gate (docs §7): a proposed tool call becomes a proposal text, the configured
//! reviewer runs on it as a child of the caller, and its output becomes a decision. Anything but
//! a clear approval is a rejection (fail closed).
//!
//! Parsing the reviewer's output is pure ([`decide`]); running it goes through the worker
//! supervisor, so every review is a worker row. Must not depend on tonic.

use std::{fmt::Write as _, sync::Arc};

use serde_json::json;

use crate::{
    resolve::Mode,
    workers::{
        model::{WorkerRecord, WorkerState},
        supervisor::{
            Admitted, Identity, Purpose, SpawnRequest, Supervisor, Visibility, WorkerError, seconds,
        },
    },
};

/// Longest reason returned, in characters (not bytes).
pub const MAX_REASON_CHARS: usize = 1024;
/// Lines of reason read after a text decision line.
pub const MAX_REASON_LINES: usize = 8;

/// How much a tool can change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolClass {
    /// Reads only (also the unspecified class): no review.
    Read,
    /// Changes state.
    Write,
    /// Changes state irreversibly or widely.
    Destructive,
}

impl ToolClass {
    /// The name shown to the reviewer.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolClass::Read => "read",
            ToolClass::Write => "write",
            ToolClass::Destructive => "destructive",
        }
    }
}

/// A validated proposal: the tool call a runtime is about to make.
#[derive(Debug, Clone)]
pub struct Proposal {
    /// The tool (non-empty unless the class is read).
    pub tool: String,
    /// Its class.
    pub class: ToolClass,
    /// What the call does.
    pub action: String,
    /// What it acts on.
    pub target: String,
    /// Why it is needed.
    pub reason: String,
    /// What could be affected.
    pub blast_radius: String,
    /// Who asked for it.
    pub operator: String,
    /// The tool's arguments, parsed (None = none given).
    pub arguments: Option<serde_json::Value>,
    /// Workspace whose agents are used ("" = none).
    pub workspace: String,
}

impl Proposal {
    /// The reviewer's prompt: a heading, one `Field: value` line per field (`(none)` when
    /// empty), and the arguments as a fenced JSON block. The layout is stable.
    pub fn prompt(&self) -> String {
        // One line per field: a multi-line value continues on indented lines, so a value can
        // never forge a field line (or a `Decision:` line) of its own.
        let or_none = |s: &str| {
            if s.trim().is_empty() {
                "(none)".to_owned()
            } else {
                s.trim().lines().collect::<Vec<_>>().join("\n    ")
            }
        };
        let mut p = String::from("# Proposed action\n\n");
        for (field, value) in [
            ("Tool", self.tool.as_str()),
            ("Class", self.class.as_str()),
            ("Action", self.action.as_str()),
            ("Target", self.target.as_str()),
            ("Reason", self.reason.as_str()),
            ("Blast radius", self.blast_radius.as_str()),
            ("Operator", self.operator.as_str()),
        ] {
            let _ = writeln!(p, "{field}: {}", or_none(value));
        }
        p.push_str("\nArguments:\n\n```json\n");
        match &self.arguments {
            Some(v) => {
                p.push_str(&serde_json::to_string_pretty(v).expect("JSON value serialises"));
            }
            None => p.push_str("null"),
        }
        p.push_str("\n```\n");
        p
    }
}

/// Approve or reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The call may run.
    Approve,
    /// The call must not run.
    Reject,
}

impl Decision {
    /// `approve` or `reject`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Reject => "reject",
        }
    }

    fn from_word(w: &str) -> Option<Self> {
        match w.to_ascii_lowercase().as_str() {
            "approve" | "approved" => Some(Decision::Approve),
            "reject" | "rejected" => Some(Decision::Reject),
            _ => None,
        }
    }
}

/// What the gate answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Approve or reject.
    pub decision: Decision,
    /// The reviewer's reason, or why the gate failed closed.
    pub reason: String,
    /// Whether a reviewer worker ran.
    pub reviewed: bool,
    /// The reviewer worker, when one was created.
    pub worker_id: Option<String>,
}

/// Reads a decision from the reviewer's output: a JSON object with a `decision` field, else the
/// first line `Decision: <approve|approved|reject|rejected>` (markup `*`, `_`, `#` and case
/// ignored; a line offering two choices is not a decision). `None` = no decision.
pub fn decide(output: &str) -> Option<(Decision, String)> {
    let trimmed = output.trim();
    if let Ok(serde_json::Value::Object(obj)) = serde_json::from_str(trimmed)
        && let Some(d) = obj
            .get("decision")
            .and_then(|d| d.as_str())
            .and_then(Decision::from_word)
    {
        let reason = obj.get("reason").and_then(|r| r.as_str()).unwrap_or("");
        return Some((d, cap(reason.trim())));
    }
    let lines: Vec<&str> = output.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let Some((d, rest)) = decision_line(line) else {
            continue;
        };
        let mut parts: Vec<&str> = Vec::new();
        if !rest.is_empty() {
            parts.push(rest);
        }
        parts.extend(
            lines[i + 1..]
                .iter()
                .map(|l| l.trim())
                .filter(|l| !l.is_empty())
                .take(MAX_REASON_LINES),
        );
        return Some((d, cap(&parts.join("\n"))));
    }
    None
}

/// Markup and whitespace around the words of a decision line.
fn skip_markup(s: &str) -> &str {
    s.trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '*' | '_' | '#'))
}

/// Splits off a leading word (ASCII letters).
fn word(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(s.len());
    s.split_at(end)
}

/// `Some((decision, rest of the line))` when `line` is a decision line.
fn decision_line(line: &str) -> Option<(Decision, &str)> {
    let s = skip_markup(line);
    let (w, s) = word(s);
    if !w.eq_ignore_ascii_case("decision") {
        return None;
    }
    let s = skip_markup(s).strip_prefix(':')?;
    let (w, rest) = word(skip_markup(s));
    let d = Decision::from_word(w)?;
    // `approve | reject`, `approve/reject`, `approve or reject`: the template, not a choice.
    let after = rest.trim_start_matches(|c: char| {
        c.is_whitespace() || matches!(c, '*' | '_' | '#' | '|' | '/' | ',')
    });
    let (next, _) = word(after);
    let next = if next.eq_ignore_ascii_case("or") {
        word(skip_markup(&after[2..])).0
    } else {
        next
    };
    if Decision::from_word(next).is_some() {
        return None;
    }
    let rest = rest
        .trim_start_matches(|c: char| {
            c.is_whitespace()
                || matches!(c, '*' | '_' | '#' | '-' | '—' | '–' | ':' | '.' | ',' | ';')
        })
        .trim_end();
    Some((d, rest))
}

/// At most [`MAX_REASON_CHARS`] characters, cut on a character boundary.
fn cap(s: &str) -> String {
    match s.char_indices().nth(MAX_REASON_CHARS) {
        Some((at, _)) => s[..at].to_owned(),
        None => s.to_owned(),
    }
}

/// The structured result recorded in a completed reviewer's row.
pub fn summarise(output: &str) -> serde_json::Value {
    let (d, reason) = decide(output)
        .unwrap_or_else(|| (Decision::Reject, "reviewer gave no decision".to_owned()));
    json!({"decision": d.as_str(), "reason": reason})
}

/// The verdict a finished reviewer row stands for (fail closed).
pub fn verdict_of(worker: &WorkerRecord, timed_out: bool, timeout: std::time::Duration) -> Verdict {
    let reject = |reason: String| Verdict {
        decision: Decision::Reject,
        reason,
        reviewed: true,
        worker_id: Some(worker.id.to_string()),
    };
    if timed_out {
        return reject(format!("review timed out after {}", seconds(timeout)));
    }
    match worker.state {
        WorkerState::Completed => match decide(worker.result.as_deref().unwrap_or("")) {
            Some((decision, reason)) => Verdict {
                decision,
                reason,
                reviewed: true,
                worker_id: Some(worker.id.to_string()),
            },
            None => reject("reviewer gave no decision".to_owned()),
        },
        _ => reject(format!(
            "reviewer failed: {}",
            worker.error.as_deref().unwrap_or("no error recorded")
        )),
    }
}

/// A finished review run.
#[derive(Debug, Clone)]
pub struct Reviewed {
    /// The reviewer worker's final record (the audit row).
    pub worker: WorkerRecord,
    /// The review deadline passed and the reviewer was stopped.
    pub timed_out: bool,
}

/// Runs the configured reviewer (`review.agent`) on `prompt` as a child of the caller and
/// waits for it, at most `review.timeout`; past that it is stopped (recorded `killed`) and
/// gone before this returns. Like a spawn, except: reserved agents may run, there is no dedupe
/// (every review runs), and the output schema is not enforced — [`summarise`] fills the
/// structured result of a completed run instead. Dropping the future stops the reviewer.
pub async fn run_reviewer(
    sup: &Arc<Supervisor>,
    id: &Identity,
    description: String,
    prompt: String,
    workspace: String,
) -> Result<Reviewed, WorkerError> {
    let deadline = sup.review_timeout();
    let req = SpawnRequest {
        agent: sup.review_agent().to_owned(),
        description,
        prompt,
        workspace,
        mode: Mode::Default,
        output_schema: None,
        wait: true,
        request_id: None,
        timeout: None,
        isolation: Some(false),
        interactive: false,
        context_id: None,
        a2a_message: None,
    };
    let purpose = Purpose::Review {
        summarise: Arc::new(summarise),
        deadline,
    };
    let started = match sup.admit(id, req, purpose).await? {
        Admitted::Started(s) => s,
        // Reviews are never deduplicated, so nothing is reused.
        Admitted::Reused(s) => {
            return Ok(Reviewed {
                worker: s.worker,
                timed_out: false,
            });
        }
    };
    let worker_id = started.record.id.clone();
    let mut done = started.done.clone();
    let finished = tokio::time::timeout(deadline, async {
        let _ = done.wait_for(Option::is_some).await;
    })
    .await;
    if finished.is_err() {
        let reason = format!("review timed out after {}", seconds(deadline));
        // Finished in the meantime is fine: the final record says how.
        let _ = sup.stop(&worker_id, &reason, &Visibility::All).await;
    }
    Ok(Reviewed {
        worker: started.finish().await,
        timed_out: finished.is_err(),
    })
}

/// Runs the gate: read-class calls pass at once; anything else is reviewed by the configured
/// reviewer as a child of the caller, and every failure is a rejection.
pub async fn review(sup: &Arc<Supervisor>, id: &Identity, p: Proposal) -> Verdict {
    let v = run_gate(sup, id, p).await;
    let label = match (v.decision, v.reviewed) {
        (Decision::Approve, false) => "approve_unreviewed",
        (Decision::Approve, true) => "approve",
        (Decision::Reject, true) => "reject",
        (Decision::Reject, false) => "reject_not_run",
    };
    sup.metrics().review_decision(label);
    v
}

async fn run_gate(sup: &Arc<Supervisor>, id: &Identity, p: Proposal) -> Verdict {
    if p.class == ToolClass::Read {
        return Verdict {
            decision: Decision::Approve,
            reason: "read-only tool: no review needed".to_owned(),
            reviewed: false,
            worker_id: None,
        };
    }
    let description = format!("review of {} ({})", p.tool, p.class.as_str());
    let run = run_reviewer(sup, id, description, p.prompt(), p.workspace.clone()).await;
    match run {
        Ok(r) => {
            let v = verdict_of(&r.worker, r.timed_out, sup.review_timeout());
            tracing::info!(worker = %r.worker.id, tool = %p.tool, decision = v.decision.as_str(), "review decided");
            v
        }
        Err(e) => {
            tracing::warn!(tool = %p.tool, error = %e, "review could not run");
            Verdict {
                decision: Decision::Reject,
                reason: format!("review could not run: {e}"),
                reviewed: false,
                worker_id: None,
            }
        }
    }
}

#[cfg(test)]
mod tests;
