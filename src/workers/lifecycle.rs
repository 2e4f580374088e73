//! The worker lifecycle: the one pure function that decides which state follows which (docs §6.1).
//!
//! ```text
//! pending → running → completed
//!                   ↘ failed
//!                   ↘ killed      (stopped while running)
//! pending → killed                (stopped before it started)
//! pending → failed                (could not start)
//! running → input_required → running   (asked its caller, then answered; docs §12.4)
//!                           ↘ failed    (no answer in time)
//!                           ↘ killed    (stopped while waiting)
//! ```
//!
//! This module owns those rules and nothing else: no I/O, no clocks, no record fields. The store
//! calls [`transition`] inside its transaction; the supervisor never decides a state itself. It
//! depends only on [`super::model::WorkerState`] and must not depend on the store, tokio or tonic.

use std::fmt;

use super::model::WorkerState;

/// Something that happened to a worker and may move it to another state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// The executor started the agent.
    Start,
    /// The agent finished successfully.
    Complete,
    /// It could not start, or it ran and failed (exit code, timeout, invalid output, orphaned).
    Fail,
    /// Someone asked to stop it (StopWorker, a cancelled `wait` call, shutdown).
    Kill,
    /// It asked its caller a question and waits for the answer (docs §12.4).
    Ask,
    /// Its question was answered: it runs again.
    Answer,
}

impl Event {
    /// Every event once, so the exhaustive transition test and any caller can enumerate them
    /// without drifting from the enum.
    pub const ALL: [Event; 6] = [
        Event::Start,
        Event::Complete,
        Event::Fail,
        Event::Kill,
        Event::Ask,
        Event::Answer,
    ];

    /// The state this event moves a worker into, read off [`transition`]: the one state every
    /// state it is legal in moves to (`None` for an event that moves nothing).
    pub fn leads_to(self) -> Option<WorkerState> {
        WorkerState::ALL
            .into_iter()
            .find_map(|from| match transition(from, self) {
                Ok(Outcome::Moved(to)) => Some(to),
                _ => None,
            })
    }

    /// Lowercase verb used in messages and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Start => "start",
            Event::Complete => "complete",
            Event::Fail => "fail",
            Event::Kill => "kill",
            Event::Ask => "ask",
            Event::Answer => "answer",
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a legal event does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The worker enters this state; the store bumps the sequence and records an event.
    Moved(WorkerState),
    /// A repeated stop on an already killed worker: nothing changes and nothing is recorded, and
    /// the caller reports the worker as it is (StopWorker is idempotent, docs §6.5).
    Absorbed,
}

/// An event the current state does not allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IllegalTransition {
    /// A stop on a worker that already finished on its own; the API answers FAILED_PRECONDITION
    /// with reason NOT_CANCELABLE.
    #[error("worker is already {state} and cannot be stopped")]
    NotCancelable {
        /// The terminal state the worker is in (`completed` or `failed`).
        state: WorkerState,
    },
    /// Any other event the state does not accept — a supervisor bug or a race lost to another
    /// transition.
    #[error("cannot {event} a worker that is {from}")]
    Invalid {
        /// The state the worker was in.
        from: WorkerState,
        /// The event that was refused.
        event: Event,
    },
}

impl IllegalTransition {
    /// The UPPER_SNAKE reason for the API's `ErrorInfo`, decided here so the gRPC layer only
    /// copies it.
    pub fn reason(&self) -> &'static str {
        match self {
            IllegalTransition::NotCancelable { .. } => "NOT_CANCELABLE",
            IllegalTransition::Invalid { .. } => "INVALID_TRANSITION",
        }
    }
}

/// Decides what `event` does to a worker in state `from`.
///
/// Pure and total: every (state, event) pair has exactly one answer, checked pair by pair in this
/// module's tests.
pub fn transition(from: WorkerState, event: Event) -> Result<Outcome, IllegalTransition> {
    use Event::{Answer, Ask, Complete, Fail, Kill, Start};
    use WorkerState::{Completed, Failed, InputRequired, Killed, Pending, Running};

    match (from, event) {
        (Pending, Start) | (InputRequired, Answer) => Ok(Outcome::Moved(Running)),
        (Pending | Running | InputRequired, Fail) => Ok(Outcome::Moved(Failed)),
        (Pending | Running | InputRequired, Kill) => Ok(Outcome::Moved(Killed)),
        (Running, Complete) => Ok(Outcome::Moved(Completed)),
        (Running, Ask) => Ok(Outcome::Moved(InputRequired)),
        (Killed, Kill) => Ok(Outcome::Absorbed),
        (Completed | Failed, Kill) => Err(IllegalTransition::NotCancelable { state: from }),
        (Pending, Complete | Ask | Answer)
        | (Running, Start | Answer)
        | (InputRequired, Start | Complete | Ask)
        | (Completed | Failed | Killed, _) => Err(IllegalTransition::Invalid { from, event }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use Event::{Answer, Ask, Complete, Fail, Kill, Start};
    use WorkerState::{Completed, Failed, InputRequired, Killed, Pending, Running};

    #[test]
    fn each_event_leads_to_one_state() {
        let to: Vec<_> = Event::ALL.into_iter().map(Event::leads_to).collect();
        assert_eq!(
            to,
            [
                Some(Running),
                Some(Completed),
                Some(Failed),
                Some(Killed),
                Some(InputRequired),
                Some(Running)
            ]
        );
    }

    /// What the table expects for one pair; `Invalid` carries no fields because they are always
    /// the pair itself.
    #[derive(Debug)]
    enum Expect {
        To(WorkerState),
        Absorbed,
        NotCancelable,
        Invalid,
    }
    use Expect::{Absorbed, Invalid, NotCancelable, To};

    /// Every (state, event) pair, exactly once.
    const TABLE: &[(WorkerState, Event, Expect)] = &[
        (Pending, Start, To(Running)),
        (Pending, Complete, Invalid),
        (Pending, Fail, To(Failed)),
        (Pending, Kill, To(Killed)),
        (Pending, Ask, Invalid),
        (Pending, Answer, Invalid),
        (Running, Start, Invalid),
        (Running, Complete, To(Completed)),
        (Running, Fail, To(Failed)),
        (Running, Kill, To(Killed)),
        (Running, Ask, To(InputRequired)),
        (Running, Answer, Invalid),
        (InputRequired, Start, Invalid),
        (InputRequired, Complete, Invalid),
        (InputRequired, Fail, To(Failed)),
        (InputRequired, Kill, To(Killed)),
        (InputRequired, Ask, Invalid),
        (InputRequired, Answer, To(Running)),
        (Completed, Start, Invalid),
        (Completed, Complete, Invalid),
        (Completed, Fail, Invalid),
        (Completed, Kill, NotCancelable),
        (Completed, Ask, Invalid),
        (Completed, Answer, Invalid),
        (Failed, Start, Invalid),
        (Failed, Complete, Invalid),
        (Failed, Fail, Invalid),
        (Failed, Kill, NotCancelable),
        (Failed, Ask, Invalid),
        (Failed, Answer, Invalid),
        (Killed, Start, Invalid),
        (Killed, Complete, Invalid),
        (Killed, Fail, Invalid),
        (Killed, Kill, Absorbed),
        (Killed, Ask, Invalid),
        (Killed, Answer, Invalid),
    ];

    #[test]
    fn table_covers_every_pair_once() {
        assert_eq!(TABLE.len(), WorkerState::ALL.len() * Event::ALL.len());
        let pairs: HashSet<_> = TABLE.iter().map(|(s, e, _)| (*s, *e)).collect();
        assert_eq!(pairs.len(), TABLE.len(), "a pair appears twice");
    }

    #[test]
    fn every_pair_matches_the_table() {
        for (from, event, expect) in TABLE {
            let got = transition(*from, *event);
            let want = match expect {
                To(state) => Ok(Outcome::Moved(*state)),
                Absorbed => Ok(Outcome::Absorbed),
                NotCancelable => Err(IllegalTransition::NotCancelable { state: *from }),
                Invalid => Err(IllegalTransition::Invalid {
                    from: *from,
                    event: *event,
                }),
            };
            assert_eq!(got, want, "({from}, {event})");
        }
    }

    #[test]
    fn moves_only_forward_and_terminal_states_never_move() {
        for (from, event, _) in TABLE {
            if let Ok(Outcome::Moved(to)) = transition(*from, *event) {
                assert!(!from.is_terminal(), "{from} moved to {to} on {event}");
                assert_ne!(to, Pending, "nothing returns to pending");
            }
        }
    }

    #[test]
    fn messages_name_the_states() {
        let not_cancelable = transition(Completed, Kill).unwrap_err();
        assert_eq!(
            not_cancelable.to_string(),
            "worker is already completed and cannot be stopped"
        );
        assert_eq!(not_cancelable.reason(), "NOT_CANCELABLE");
        let invalid = transition(Pending, Complete).unwrap_err();
        assert_eq!(
            invalid.to_string(),
            "cannot complete a worker that is pending"
        );
        assert_eq!(invalid.reason(), "INVALID_TRANSITION");
    }
}
