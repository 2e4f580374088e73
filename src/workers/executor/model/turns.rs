//! The agent loop as one pure state machine (docs/model.md §11.3–§11.5): [`Turns::step`] takes
//! what just happened ([`Event`]) and says what the driver does next ([`Action`]): ask the
//! model, have a call reviewed, run a call, or finish. Every rule of a turn is decided here —
//! the turn budget, an answer cut short, the output rule, `submit_result` ending the call list,
//! arguments that are not JSON, a tool that was not offered, the spawn tool at the depth limit,
//! which calls go through the review gate before they run, and the wording of every reply
//! ([`Reply`]) — and so is every progress event the loop reports ([`Note`]). The driver only
//! does the I/O each action names.
//!
//! A call's life: taken in order from the answer; decided here (answered at once, or
//! [`Action::Review`] then [`Action::Run`], or [`Action::Run`]); its reply appended; the next
//! call. When the answer's calls are spent, the next turn begins.

use std::collections::VecDeque;

use serde_json::{Value, json};

use super::conversation::{CallStep, Conversation, Reply, Step, head};
use super::wire::{Answer, ToolCall};
use crate::workers::model::ProgressKind;

/// Bound on the text of one progress event (docs/workers.md §6.9).
pub const EVENT_TEXT: usize = 64 * 1024;

/// What the loop knows of the worker's tools: enough to answer every call that needs no tool.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// The names offered, in order (`submit_result` first).
    pub offered: Vec<String>,
    /// The offered names whose calls go through the review gate before they run.
    pub gated: Vec<String>,
    /// The spawn tool's name when the worker is at the depth limit (not offered; a call of it
    /// gets the depth message, not the unknown-tool one).
    pub depth_limited: Option<String>,
}

/// What just happened.
#[derive(Debug)]
pub enum Event {
    /// The run begins.
    Start,
    /// The model answered the turn.
    Answered(Answer),
    /// The model request failed; the run fails with this text.
    AskFailed(String),
    /// The review of the call in hand ended.
    Reviewed(Review),
    /// The call in hand ran; this goes back to the model.
    Ran(Reply),
    /// A message interrupted the model request, the review or the call in hand (docs §12.2):
    /// the request is abandoned, or the call and the rest of the answer's calls are answered
    /// as interrupted, and the next turn begins.
    Interrupted,
}

/// The reply to a call a message interrupted, or that never ran because one did.
pub const INTERRUPTED: &str = "interrupted by a new message; the call did not finish";

/// How the review of a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Review {
    /// Approved: the call runs.
    Approved,
    /// Rejected with this reason: the call does not run.
    Rejected(String),
    /// No review gate is bound: the call does not run.
    Unavailable,
}

/// What the driver does next.
#[derive(Debug, PartialEq)]
pub enum Action {
    /// Send the next turn's request ([`Turns::request`]) and hand back the answer.
    Ask,
    /// Have this call reviewed, and hand back [`Event::Reviewed`].
    Review(Call),
    /// Run this call, and hand back [`Event::Ran`].
    Run(Call),
    /// The run is over.
    Finish(End),
}

/// How a run ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// With this result (JSON text with an output schema).
    Completed(String),
    /// With this failure.
    Failed(String),
}

/// A call the driver reviews or runs, its arguments parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The call as the model made it.
    pub call: ToolCall,
    /// Its arguments (`None`: none given).
    pub args: Option<Value>,
}

/// A progress event the loop reports, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    /// Its kind.
    pub kind: ProgressKind,
    /// Its text, bounded by [`EVENT_TEXT`].
    pub text: String,
    /// Its structured part.
    pub data: Option<Value>,
}

/// Where the loop is: what it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Not started: waits for [`Event::Start`].
    Idle,
    /// Waits for the model's answer ([`Event::Answered`] or [`Event::AskFailed`]).
    Asking,
    /// Waits for the review of the call in hand ([`Event::Reviewed`]).
    Reviewing,
    /// Waits for the call in hand to run ([`Event::Ran`]).
    Running,
    /// Over: every event is refused.
    Finished,
}

impl Event {
    fn what(&self) -> &'static str {
        match self {
            Event::Start => "the start",
            Event::Answered(_) => "an answer",
            Event::AskFailed(_) => "a failed request",
            Event::Reviewed(_) => "a review",
            Event::Ran(_) => "a tool's reply",
            Event::Interrupted => "an interruption",
        }
    }
}

/// The loop of one worker: its conversation, the calls of the current answer, the call in hand.
#[derive(Debug)]
pub struct Turns {
    phase: Phase,
    conv: Conversation,
    catalog: Catalog,
    model: String,
    queue: VecDeque<ToolCall>,
    /// The call being reviewed or run, and whether a review ran for it.
    current: Option<(Call, bool)>,
    notes: Vec<Note>,
}

impl Turns {
    /// The loop of `conv` on `model` with the tools of `catalog`.
    pub fn new(conv: Conversation, catalog: Catalog, model: &str) -> Self {
        Self {
            phase: Phase::Idle,
            conv,
            catalog,
            model: model.to_owned(),
            queue: VecDeque::new(),
            current: None,
            notes: Vec::new(),
        }
    }

    /// The conversation so far.
    pub fn conversation(&self) -> &Conversation {
        &self.conv
    }

    /// The body of the request [`Action::Ask`] sends.
    pub fn request(&self, tools: &[Value], effort: Option<&str>) -> Value {
        self.conv.request(&self.model, tools, effort)
    }

    /// The progress events decided since the last call, in order.
    pub fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.notes)
    }

    /// What the loop waits for.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The one entry point: what happened → what comes next. An event the loop does not wait
    /// for (a driver's defect) ends the run as failed, naming both.
    pub fn step(&mut self, event: Event) -> Action {
        let action = match (self.phase, event) {
            (Phase::Idle, Event::Start) => self.next_turn(),
            (Phase::Asking, Event::AskFailed(reason)) => Action::Finish(End::Failed(reason)),
            (Phase::Asking, Event::Answered(answer)) => self.answered(answer),
            (Phase::Reviewing, Event::Reviewed(review)) => self.reviewed(review),
            (Phase::Running, Event::Ran(reply)) => {
                if let Some((call, reviewed)) = self.current.take() {
                    self.reply(&call.call, reply, reviewed);
                }
                self.next_call()
            }
            (Phase::Asking, Event::Interrupted) => self.next_turn(),
            (Phase::Reviewing | Phase::Running, Event::Interrupted) => {
                if let Some((call, reviewed)) = self.current.take() {
                    self.reply(&call.call, Reply::Refused(INTERRUPTED.to_owned()), reviewed);
                }
                self.drop_queue(INTERRUPTED);
                self.next_turn()
            }
            (phase, event) => Action::Finish(End::Failed(format!(
                "the agent loop got {} while {}",
                event.what(),
                match phase {
                    Phase::Idle => "not started",
                    Phase::Asking => "waiting for the model",
                    Phase::Reviewing => "waiting for a review",
                    Phase::Running => "waiting for a tool",
                    Phase::Finished => "finished",
                }
            ))),
        };
        self.phase = match &action {
            Action::Ask => Phase::Asking,
            Action::Review(_) => Phase::Reviewing,
            Action::Run(_) => Phase::Running,
            Action::Finish(_) => Phase::Finished,
        };
        action
    }

    /// Answers the answer's calls not yet decided with `why`, without notes: they never ran.
    fn drop_queue(&mut self, why: &str) {
        for call in std::mem::take(&mut self.queue) {
            self.conv
                .tool_result(&call.id, Reply::Refused(why.to_owned()));
        }
    }

    /// Delivers a message from the worker's caller (docs §12.2) as a user message, with its
    /// progress event; only before a request is sent ([`Phase::Asking`]).
    pub fn deliver(&mut self, text: &str, data: Value) {
        self.conv.push_user(text);
        self.note(ProgressKind::Message, text.to_owned(), Some(data));
    }

    /// Answers the calls a persisted conversation left open (a question, a cut run): the
    /// question with `answer` (taken, with its note), any other as not finished. Before
    /// [`Event::Start`].
    pub fn answer_open(&mut self, ask_tool: &str, answer: &mut Option<(String, Value)>) {
        for (id, name) in self.conv.open_calls() {
            let reply = if name == ask_tool
                && let Some((text, data)) = answer.take()
            {
                self.note(ProgressKind::Message, text.clone(), Some(data));
                Reply::Answer(text)
            } else {
                Reply::Refused(
                    "the call did not finish: the worker's run ended before it answered".to_owned(),
                )
            };
            self.conv.tool_result(&id, reply);
        }
    }

    /// Another turn after the run completed: a message arrived as it finished (docs §12.2,
    /// the seal), delivered with [`Self::deliver`] next.
    pub fn reopen(&mut self) -> Action {
        let action = if self.phase == Phase::Finished {
            self.next_turn()
        } else {
            Action::Finish(End::Failed(
                "the agent loop was reopened while running".to_owned(),
            ))
        };
        self.phase = match &action {
            Action::Finish(_) => Phase::Finished,
            _ => Phase::Asking,
        };
        action
    }

    /// The call in hand asked the caller (docs §12.4): the run stops here, leaving that call
    /// open for the answer; the answer's other calls are answered as not run.
    pub fn park(&mut self) {
        self.current = None;
        self.drop_queue(
            "not run: the worker stopped to ask its caller; call it again if it is still needed",
        );
        self.phase = Phase::Finished;
    }

    fn next_turn(&mut self) -> Action {
        match self.conv.begin_turn() {
            Ok(_) => Action::Ask,
            Err(reason) => Action::Finish(End::Failed(reason)),
        }
    }

    fn answered(&mut self, answer: Answer) -> Action {
        let turn = self.conv.turns();
        let usage = answer.usage.map(|u| {
            json!({"prompt_tokens": u.prompt, "completion_tokens": u.completion, "total_tokens": u.total})
        });
        self.note(
            ProgressKind::Status,
            format!("turn {turn}: {}", self.model),
            Some(json!({"turn": turn, "model": self.model, "finish_reason": answer.finish_reason, "usage": usage})),
        );
        if !answer.content.trim().is_empty() {
            self.note(ProgressKind::Text, answer.content.clone(), None);
        }
        match self.conv.answer(answer) {
            Step::Done(result) => Action::Finish(End::Completed(result)),
            Step::Failed(reason) => Action::Finish(End::Failed(reason)),
            Step::Again => self.next_turn(),
            Step::Tools(calls) => {
                self.queue = calls.into();
                self.next_call()
            }
        }
    }

    /// Takes the next call of the answer and decides it; the next turn once they are spent.
    fn next_call(&mut self) -> Action {
        while let Some(call) = self.queue.pop_front() {
            let args = head(&call.arguments, EVENT_TEXT - 512).to_owned();
            self.note(
                ProgressKind::ToolCall,
                call.name.clone(),
                Some(json!({"id": call.id, "name": call.name, "arguments": args})),
            );
            match self.conv.take_call(&call) {
                CallStep::Done(result) => {
                    // Answered in the conversation too, so that a transcript a later turn or
                    // a continuation carries on from has a reply for every call.
                    self.conv
                        .tool_result(&call.id, Reply::Answer("result accepted".to_owned()));
                    self.result_note(&call, "result accepted", false, false);
                    self.drop_queue("not run: submit_result ended the run");
                    return Action::Finish(End::Completed(result));
                }
                CallStep::Failed(reason) => return Action::Finish(End::Failed(reason)),
                CallStep::Answered(text) => self.result_note(&call, &text, true, false),
                CallStep::Run => match self.decide(call) {
                    Ok(action) => return action,
                    Err((call, reply)) => self.reply(&call, reply, false),
                },
            }
        }
        self.next_turn()
    }

    /// A call that is not `submit_result`: answered here (`Err`: the call and its reply), or
    /// reviewed first, or run.
    fn decide(&mut self, call: ToolCall) -> Result<Action, (ToolCall, Reply)> {
        let args = match call.arguments.trim() {
            "" => None,
            text => match serde_json::from_str(text) {
                Ok(v) => Some(v),
                Err(e) => {
                    let reply = Reply::bad_arguments(&call.name, &e);
                    return Err((call, reply));
                }
            },
        };
        if self.catalog.depth_limited.as_deref() == Some(call.name.as_str()) {
            return Err((call, Reply::depth_limit()));
        }
        if !self.catalog.offered.contains(&call.name) {
            let reply = Reply::unknown_tool(&call.name, &self.catalog.offered);
            return Err((call, reply));
        }
        let gated = self.catalog.gated.contains(&call.name);
        let call = Call { call, args };
        self.current = Some((call.clone(), false));
        Ok(if gated {
            Action::Review(call)
        } else {
            Action::Run(call)
        })
    }

    fn reviewed(&mut self, review: Review) -> Action {
        let Some((call, _)) = self.current.take() else {
            return self.next_call();
        };
        match review {
            Review::Approved => {
                self.current = Some((call.clone(), true));
                Action::Run(call)
            }
            Review::Rejected(reason) => {
                self.reply(&call.call, Reply::Rejected(reason), true);
                self.next_call()
            }
            Review::Unavailable => {
                let reply = Reply::Refused(
                    "rejected by review: the review gate is not available.".to_owned(),
                );
                self.reply(&call.call, reply, false);
                self.next_call()
            }
        }
    }

    /// Appends the reply to `call` and notes it.
    fn reply(&mut self, call: &ToolCall, reply: Reply, reviewed: bool) {
        let is_error = reply.is_error();
        let text = self.conv.tool_result(&call.id, reply);
        self.result_note(call, &text, is_error, reviewed);
    }

    fn result_note(&mut self, call: &ToolCall, text: &str, is_error: bool, reviewed: bool) {
        self.note(
            ProgressKind::ToolResult,
            text.to_owned(),
            Some(json!({"id": call.id, "name": call.name, "is_error": is_error, "reviewed": reviewed})),
        );
    }

    fn note(&mut self, kind: ProgressKind, text: String, data: Option<Value>) {
        let text = if text.len() > EVENT_TEXT {
            head(&text, EVENT_TEXT).to_owned()
        } else {
            text
        };
        self.notes.push(Note { kind, text, data });
    }
}

#[cfg(test)]
mod tests {
    use super::super::conversation::{Bounds, DO_NOT_RETRY};
    use super::*;

    fn turns(max_turns: u32) -> Turns {
        let conv = Conversation::new(
            "sys",
            "brief",
            None,
            Bounds {
                max_turns,
                output_retries: 1,
                tool_result_bytes: 1 << 16,
                result_bytes: 1 << 16,
            },
        );
        let catalog = Catalog {
            offered: ["submit_result", "mcp__fs__read", "mcp__fs__write", "task"]
                .map(str::to_owned)
                .to_vec(),
            gated: vec!["mcp__fs__write".to_owned()],
            depth_limited: Some("agent".to_owned()),
        };
        Turns::new(conv, catalog, "m")
    }

    fn calls(list: &[(&str, &str)]) -> Answer {
        Answer {
            tool_calls: list
                .iter()
                .enumerate()
                .map(|(i, (name, args))| ToolCall {
                    id: format!("c{i}"),
                    name: (*name).to_owned(),
                    arguments: (*args).to_owned(),
                })
                .collect(),
            finish_reason: Some("tool_calls".into()),
            ..Answer::default()
        }
    }

    fn text(t: &str) -> Answer {
        Answer {
            content: t.into(),
            finish_reason: Some("stop".into()),
            ..Answer::default()
        }
    }

    /// The kinds of event of the table.
    #[derive(Debug, Clone, Copy)]
    enum E {
        Start,
        Plain,
        Gated,
        Open,
        Submit,
        Unknown,
        BadJson,
        DepthLimited,
        Cut,
        AskFailed,
        Approved,
        Rejected,
        NoGate,
        Ran,
    }
    const EVENTS: [E; 14] = [
        E::Start,
        E::Plain,
        E::Gated,
        E::Open,
        E::Submit,
        E::Unknown,
        E::BadJson,
        E::DepthLimited,
        E::Cut,
        E::AskFailed,
        E::Approved,
        E::Rejected,
        E::NoGate,
        E::Ran,
    ];

    fn event(e: E) -> Event {
        match e {
            E::Start => Event::Start,
            E::Plain => Event::Answered(text("the answer")),
            E::Gated => Event::Answered(calls(&[("mcp__fs__write", "{}")])),
            E::Open => Event::Answered(calls(&[("mcp__fs__read", "{}")])),
            E::Submit => Event::Answered(calls(&[("submit_result", r#"{"result": "r"}"#)])),
            E::Unknown => Event::Answered(calls(&[("nope", "{}")])),
            E::BadJson => Event::Answered(calls(&[("mcp__fs__read", "{x")])),
            E::DepthLimited => Event::Answered(calls(&[("agent", "{}")])),
            E::Cut => Event::Answered(Answer {
                finish_reason: Some("length".into()),
                ..text("half")
            }),
            E::AskFailed => Event::AskFailed("boom".into()),
            E::Approved => Event::Reviewed(Review::Approved),
            E::Rejected => Event::Reviewed(Review::Rejected("too risky".into())),
            E::NoGate => Event::Reviewed(Review::Unavailable),
            E::Ran => Event::Ran(Reply::Answer("ok".into())),
        }
    }

    /// A loop in `phase`, reached through the protocol.
    fn at(phase: Phase) -> Turns {
        let mut t = turns(10);
        let path: &[E] = match phase {
            Phase::Idle => &[],
            Phase::Asking => &[E::Start],
            Phase::Reviewing => &[E::Start, E::Gated],
            Phase::Running => &[E::Start, E::Open],
            Phase::Finished => &[E::Start, E::Plain],
        };
        for e in path {
            t.step(event(*e));
        }
        assert_eq!(t.phase(), phase);
        t
    }

    /// What the table expects of one pair.
    #[derive(Debug, PartialEq)]
    enum X {
        Ask,
        Review,
        Run,
        Completed,
        Failed,
        /// Refused: not an event of this phase.
        Refused,
    }

    fn kind(a: &Action) -> X {
        match a {
            Action::Ask => X::Ask,
            Action::Review(_) => X::Review,
            Action::Run(_) => X::Run,
            Action::Finish(End::Completed(_)) => X::Completed,
            Action::Finish(End::Failed(r)) if r.starts_with("the agent loop got") => X::Refused,
            Action::Finish(End::Failed(_)) => X::Failed,
        }
    }

    /// Every (phase, event) pair: what comes next.
    #[test]
    fn every_phase_and_event() {
        use X::*;
        let table: [(Phase, [X; 14]); 5] = [
            // Start Plain  Gated   Open Submit     Unknown BadJson Depth Cut     AskFailed Approved Rejected NoGate Ran
            (
                Phase::Idle,
                [
                    Ask, Refused, Refused, Refused, Refused, Refused, Refused, Refused, Refused,
                    Refused, Refused, Refused, Refused, Refused,
                ],
            ),
            (
                Phase::Asking,
                [
                    Refused, Completed, Review, Run, Completed, Ask, Ask, Ask, Failed, Failed,
                    Refused, Refused, Refused, Refused,
                ],
            ),
            (
                Phase::Reviewing,
                [
                    Refused, Refused, Refused, Refused, Refused, Refused, Refused, Refused,
                    Refused, Refused, Run, Ask, Ask, Refused,
                ],
            ),
            (
                Phase::Running,
                [
                    Refused, Refused, Refused, Refused, Refused, Refused, Refused, Refused,
                    Refused, Refused, Refused, Refused, Refused, Ask,
                ],
            ),
            (
                Phase::Finished,
                [
                    Refused, Refused, Refused, Refused, Refused, Refused, Refused, Refused,
                    Refused, Refused, Refused, Refused, Refused, Refused,
                ],
            ),
        ];
        for (phase, row) in table {
            for (e, want) in EVENTS.iter().zip(row) {
                let got = at(phase).step(event(*e));
                assert_eq!(kind(&got), want, "({phase:?}, {e:?}): {got:?}");
            }
        }
    }

    /// The replies decided without a tool, each worded once, and the notes that report them.
    #[test]
    fn calls_answered_here_and_their_notes() {
        let mut t = at(Phase::Asking);
        let a = t.step(Event::Answered(calls(&[
            ("nope", "{}"),
            ("mcp__fs__read", "{x"),
            ("agent", "{}"),
            ("mcp__fs__write", r#"{"path": "a"}"#),
        ])));
        let Action::Review(call) = a else {
            panic!("{a:?}")
        };
        assert_eq!(call.args, Some(json!({"path": "a"})));
        let tools: Vec<String> = t
            .conversation()
            .messages()
            .iter()
            .filter_map(|m| match m {
                super::super::conversation::Message::Tool { content, .. } => Some(content.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(tools.len(), 3);
        assert!(tools[0].starts_with("unknown tool nope; the tools you have are: submit_result, mcp__fs__read, mcp__fs__write, task."));
        assert!(tools[1].starts_with("the arguments of mcp__fs__read are not JSON: "));
        assert_eq!(
            tools[2],
            format!("Agent depth limit reached. Solve the task yourself. {DO_NOT_RETRY}")
        );
        let notes = t.take_notes();
        let kinds: Vec<ProgressKind> = notes.iter().map(|n| n.kind).collect();
        use ProgressKind::{Status, ToolCall as Call, ToolResult as Result};
        assert_eq!(
            kinds,
            [Status, Call, Result, Call, Result, Call, Result, Call]
        );
        assert_eq!(notes[0].text, "turn 1: m");
        assert_eq!(notes[2].data.as_ref().unwrap()["is_error"], true);
        // Rejected by review: the call does not run, its reply says why, and it was reviewed.
        let a = t.step(Event::Reviewed(Review::Rejected("too risky".into())));
        assert_eq!(a, Action::Ask);
        let notes = t.take_notes();
        assert_eq!(notes[0].text, "rejected by review: too risky");
        assert_eq!(notes[0].data.as_ref().unwrap()["reviewed"], true);
    }

    /// An accepted `submit_result` ends the list: the calls after it are never decided.
    #[test]
    fn submit_ends_the_call_list() {
        let mut t = at(Phase::Asking);
        let a = t.step(Event::Answered(calls(&[
            ("mcp__fs__read", "{x"),
            ("submit_result", r#"{"result": "done"}"#),
            ("mcp__fs__write", "{}"),
        ])));
        assert_eq!(a, Action::Finish(End::Completed("done".into())));
        let last = t.take_notes().pop().unwrap();
        assert_eq!(last.text, "result accepted");
        assert_eq!(t.phase(), Phase::Finished);
    }

    /// The budget: the turn after the last one fails, however the last one ended.
    #[test]
    fn the_turn_budget_is_counted_here() {
        let mut t = turns(1);
        assert_eq!(t.step(Event::Start), Action::Ask);
        let a = t.step(Event::Answered(calls(&[("mcp__fs__read", "{}")])));
        assert!(matches!(a, Action::Run(_)));
        assert_eq!(
            t.step(Event::Ran(Reply::Answer("x".into()))),
            Action::Finish(End::Failed("max turns (1) reached".into()))
        );
    }
}
