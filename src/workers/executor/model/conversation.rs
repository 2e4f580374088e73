//! What one worker's conversation holds (docs/model.md §11.3–§11.5), pure: the messages so far,
//! the turn budget, the output rule, the request body, which call of an answer ends the run
//! (`submit_result`), and the wording of every reply to a tool call ([`Reply`]: an answer, a
//! refusal, the tool's own error, a review's rejection). The loop that steps through it, event
//! by event, is [`super::turns`]; neither does I/O, so every rule is unit-tested without a
//! server, and the driver is tested in process with a fake model, a fake MCP server and a fake
//! review gate under paused time.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::wire::{Answer, ToolCall};

/// The name of the implicit tool that ends a run with its result.
pub const SUBMIT_RESULT: &str = "submit_result";

/// The sentence every tool error ends with (docs/model.md §11.4).
pub const DO_NOT_RETRY: &str =
    "Do not repeat the same call unchanged; fix the arguments or take another approach.";

/// What one tool call gives back to the model (docs/model.md §11.4): its answer, or one of
/// the kinds of error, each worded here and nowhere else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The tool's answer.
    Answer(String),
    /// The call was refused or failed before the tool answered (bad arguments, an unknown
    /// tool, a timeout, a transport failure, a spawn refusal): `why`, a full stop when it has
    /// none, and [`DO_NOT_RETRY`].
    Refused(String),
    /// The tool answered with an error (`isError`): its text and [`DO_NOT_RETRY`].
    ToolError(String),
    /// The review gate rejected the call, which did not run: `rejected by review: <reason>`.
    Rejected(String),
    /// An invalid `submit_result`: `why. ` and [`DO_NOT_RETRY`].
    Invalid(String),
}

impl Reply {
    /// Whether the model is told the call failed.
    pub fn is_error(&self) -> bool {
        !matches!(self, Reply::Answer(_))
    }

    /// The text the model is sent.
    pub fn into_text(self) -> String {
        match self {
            Reply::Answer(text) => text,
            Reply::Refused(why) => {
                // A refusal from agentry's own API has no final stop; the instruction is a
                // sentence of its own.
                let stop = if why.ends_with(['.', '!', '?']) {
                    ""
                } else {
                    "."
                };
                format!("{why}{stop} {DO_NOT_RETRY}")
            }
            Reply::ToolError(text) => format!("{text} {DO_NOT_RETRY}"),
            Reply::Rejected(reason) => format!("rejected by review: {reason}"),
            Reply::Invalid(why) => format!("{why}. {DO_NOT_RETRY}"),
        }
    }

    /// A call of `name` whose arguments are not JSON.
    pub fn bad_arguments(name: &str, e: &serde_json::Error) -> Self {
        Reply::Refused(format!("the arguments of {name} are not JSON: {e}."))
    }

    /// A call of a name that was not offered.
    pub fn unknown_tool(name: &str, offered: &[String]) -> Self {
        Reply::Refused(format!(
            "unknown tool {name}; the tools you have are: {}. Call only one of these.",
            offered.join(", ")
        ))
    }

    /// The spawn tool's name at the depth limit.
    pub fn depth_limit() -> Self {
        Reply::Refused("Agent depth limit reached. Solve the task yourself.".to_owned())
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
pub(super) fn head(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// What the loop does with one tool call of an answer.
#[derive(Debug, PartialEq)]
pub enum CallStep {
    /// The call is `submit_result` and it was accepted: the run is over with this result, and
    /// the calls after it in the same answer are not run.
    Done(String),
    /// The run failed for this reason (results refused once too often).
    Failed(String),
    /// The call was answered here (a refused `submit_result`): its text, already appended.
    Answered(String),
    /// The driver runs it, then hands its [`Reply`] to [`Conversation::tool_result`].
    Run,
}

/// One Chat Completions message, as the API takes it; also one entry of a persisted
/// transcript (docs §12.3).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// The composed system prompt.
    System {
        /// Its text.
        content: String,
    },
    /// The brief, or a correction of an unusable answer.
    User {
        /// Its text.
        content: String,
    },
    /// What the model said and asked for.
    Assistant {
        /// Its text (`null` when it only called tools).
        content: Option<String>,
        /// The calls it made.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireCall>,
    },
    /// One tool's answer.
    Tool {
        /// The call it answers.
        tool_call_id: String,
        /// The result or the error text.
        content: String,
    },
}

/// A tool call as it is echoed back in an assistant message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WireCall {
    /// The call's id.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Name and arguments.
    pub function: WireFunction,
}

/// The function part of a [`WireCall`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WireFunction {
    /// The tool name.
    pub name: String,
    /// The arguments as the model wrote them (JSON text).
    pub arguments: String,
}

/// The loop's bounds for one worker.
#[derive(Debug, Clone)]
pub struct Bounds {
    /// Turns before `max turns (N) reached`.
    pub max_turns: u32,
    /// Invalid results handed back before the run fails.
    pub output_retries: u32,
    /// Bytes of a tool result handed back; the rest is cut, with a note (`model.max_tool_result_bytes`).
    pub tool_result_bytes: usize,
    /// Bytes of the worker's result (`executor.max_output_bytes`, as for an exec worker's stdout).
    pub result_bytes: usize,
}

/// What follows an answer.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Run these calls, in order, and hand each result back.
    Tools(Vec<ToolCall>),
    /// Ask again: the answer was unusable and a correction was appended.
    Again,
    /// The run is over with this result (JSON text with an output schema).
    Done(String),
    /// The run failed for this reason.
    Failed(String),
}

/// What a `submit_result` call did.
#[derive(Debug, PartialEq)]
pub enum Submitted {
    /// Accepted: the run is over with this result.
    Done(String),
    /// Refused: this text goes back as the tool's error; the run goes on.
    Refused(String),
    /// Refused once too often: the run failed for this reason.
    Failed(String),
}

/// The conversation of one worker.
#[derive(Debug)]
pub struct Conversation {
    messages: Vec<Message>,
    bounds: Bounds,
    schema: Option<Value>,
    turns: u32,
    invalid: u32,
}

impl Conversation {
    /// A conversation that starts with the system prompt and the brief.
    pub fn new(system: &str, prompt: &str, schema: Option<Value>, bounds: Bounds) -> Self {
        let mut messages = Vec::with_capacity(8);
        if !system.trim().is_empty() {
            messages.push(Message::System {
                content: system.to_owned(),
            });
        }
        messages.push(Message::User {
            content: prompt.to_owned(),
        });
        Self {
            messages,
            bounds,
            schema,
            turns: 0,
            invalid: 0,
        }
    }

    /// A conversation that carries on from a persisted transcript (docs §12.3): the turn
    /// budget and the count of refused results start again.
    pub fn resume(messages: Vec<Message>, schema: Option<Value>, bounds: Bounds) -> Self {
        Self {
            messages,
            bounds,
            schema,
            turns: 0,
            invalid: 0,
        }
    }

    /// The messages to send.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Appends a message for the model from the worker's caller (docs §12.2).
    pub fn push_user(&mut self, text: &str) {
        self.messages.push(Message::User {
            content: text.to_owned(),
        });
    }

    /// The calls of the last assistant message that have no reply yet, in order (id, name):
    /// a transcript that stopped to ask, or was cut by a failure, leaves some.
    pub fn open_calls(&self) -> Vec<(String, String)> {
        let Some(pos) = self
            .messages
            .iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
        else {
            return Vec::new();
        };
        let Message::Assistant { tool_calls, .. } = &self.messages[pos] else {
            return Vec::new();
        };
        let answered: Vec<&str> = self.messages[pos + 1..]
            .iter()
            .filter_map(|m| match m {
                Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
                _ => None,
            })
            .collect();
        tool_calls
            .iter()
            .filter(|c| !answered.contains(&c.id.as_str()))
            .map(|c| (c.id.clone(), c.function.name.clone()))
            .collect()
    }

    /// Turns taken so far.
    pub fn turns(&self) -> u32 {
        self.turns
    }

    /// The body of the next turn's request (docs/model.md §11.3): `model`, the messages so far,
    /// streamed with usage, the offered `tools` when there are any, and `reasoning_effort`.
    pub fn request(&self, model: &str, tools: &[Value], effort: Option<&str>) -> Value {
        let mut body = json!({
            "model": model,
            "messages": self.messages(),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools.to_vec());
        }
        if let Some(e) = effort {
            body["reasoning_effort"] = json!(e);
        }
        body
    }

    /// Takes one tool call of the current answer, in order: `submit_result` is decided here;
    /// any other call is the driver's to run.
    pub fn take_call(&mut self, call: &ToolCall) -> CallStep {
        if call.name != SUBMIT_RESULT {
            return CallStep::Run;
        }
        match self.submit(&call.arguments) {
            Submitted::Done(result) => CallStep::Done(result),
            Submitted::Failed(reason) => CallStep::Failed(reason),
            Submitted::Refused(why) => {
                let text = self.tool_result(&call.id, Reply::Invalid(why));
                CallStep::Answered(text)
            }
        }
    }

    /// Starts a turn; `Err` with the failure once the budget is spent.
    pub fn begin_turn(&mut self) -> Result<u32, String> {
        if self.turns >= self.bounds.max_turns {
            return Err(format!("max turns ({}) reached", self.bounds.max_turns));
        }
        self.turns += 1;
        Ok(self.turns)
    }

    /// Takes the model's answer to the current turn. An answer the provider cut short is never
    /// a result: its text and its tool arguments may stop midway.
    pub fn answer(&mut self, answer: Answer) -> Step {
        match answer.finish_reason.as_deref() {
            Some("length") => {
                return Step::Failed(
                    "the model's answer was cut at its output token limit (finish_reason: length); a truncated answer is not a result".to_owned(),
                );
            }
            Some("content_filter") => {
                return Step::Failed(
                    "the provider withheld the model's answer (finish_reason: content_filter)"
                        .to_owned(),
                );
            }
            _ => {}
        }
        let text = (!answer.content.is_empty()).then(|| answer.content.clone());
        self.messages.push(Message::Assistant {
            content: text,
            tool_calls: answer
                .tool_calls
                .iter()
                .map(|c| WireCall {
                    id: c.id.clone(),
                    kind: "function".to_owned(),
                    function: WireFunction {
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    },
                })
                .collect(),
        });
        if !answer.tool_calls.is_empty() {
            return Step::Tools(answer.tool_calls);
        }
        // A plain answer ends the run; with a schema it must be the result itself.
        let Some(schema) = &self.schema else {
            return self.done(answer.content);
        };
        match crate::schema::validate_output(schema, &answer.content) {
            Ok(v) => self.done(v.to_string()),
            Err(why) => match self.refuse(why) {
                Submitted::Failed(reason) => Step::Failed(reason),
                Submitted::Refused(text) => {
                    self.messages.push(Message::User {
                        content: format!(
                            "{text} Call {SUBMIT_RESULT} with a result that matches the output schema."
                        ),
                    });
                    Step::Again
                }
                Submitted::Done(_) => unreachable!("refuse never accepts"),
            },
        }
    }

    /// The end of the run with `result`, unless it is over the bound of a worker's result.
    fn done(&self, result: String) -> Step {
        match self.over_result(&result) {
            Some(why) => Step::Failed(why),
            None => Step::Done(result),
        }
    }

    fn over_result(&self, result: &str) -> Option<String> {
        (result.len() > self.bounds.result_bytes).then(|| {
            format!(
                "the result is {} bytes; the limit (executor.max_output_bytes) is {}",
                result.len(),
                self.bounds.result_bytes
            )
        })
    }

    /// Appends the reply to call `id`, cut to [`Bounds::tool_result_bytes`] with a note that
    /// says so (it goes back with every later turn); returns the text appended.
    pub fn tool_result(&mut self, id: &str, reply: Reply) -> String {
        let mut content = reply.into_text();
        let max = self.bounds.tool_result_bytes;
        if content.len() > max {
            let whole = content.len();
            let end = head(&content, max).len();
            content.truncate(end);
            content.push_str(&format!(
                "\n[cut: the tool returned {whole} bytes; only the first {end} are shown (model.max_tool_result_bytes)]"
            ));
        }
        self.messages.push(Message::Tool {
            tool_call_id: id.to_owned(),
            content: content.clone(),
        });
        content
    }

    /// Checks the arguments of a `submit_result` call (its `result` against the schema).
    pub fn submit(&mut self, arguments: &str) -> Submitted {
        let args: Value = match serde_json::from_str(arguments) {
            Ok(v) => v,
            Err(e) => return self.refuse(format!("the arguments are not JSON: {e}")),
        };
        let Some(result) = args.get("result") else {
            return self.refuse("the arguments have no \"result\"".to_owned());
        };
        let result = match (&self.schema, result) {
            (None, Value::String(s)) => s.clone(),
            (None, other) => other.to_string(),
            (Some(schema), value) => {
                match crate::schema::validate_output(schema, &value.to_string()) {
                    Ok(v) => v.to_string(),
                    Err(why) => return self.refuse(why),
                }
            }
        };
        match self.over_result(&result) {
            Some(why) => Submitted::Failed(why),
            None => Submitted::Done(result),
        }
    }

    /// Counts one unusable result: the text for the model, or the failure once retries are
    /// spent.
    fn refuse(&mut self, why: String) -> Submitted {
        self.invalid += 1;
        if self.invalid > self.bounds.output_retries {
            return Submitted::Failed(format!(
                "output invalid after {} attempts: {why}",
                self.invalid
            ));
        }
        Submitted::Refused(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bounds(max_turns: u32, output_retries: u32) -> Bounds {
        Bounds {
            max_turns,
            output_retries,
            tool_result_bytes: 16,
            result_bytes: 32,
        }
    }

    /// Every kind of reply, worded in one place: (reply, text for the model, is an error).
    #[test]
    fn replies_are_worded_here() {
        let table = [
            (Reply::Answer("42".into()), "42".to_owned(), false),
            (
                Reply::Refused("no such agent".into()),
                format!("no such agent. {DO_NOT_RETRY}"),
                true,
            ),
            (
                Reply::Refused("Agent depth limit reached.".into()),
                format!("Agent depth limit reached. {DO_NOT_RETRY}"),
                true,
            ),
            (
                Reply::ToolError("disk full".into()),
                format!("disk full {DO_NOT_RETRY}"),
                true,
            ),
            (
                Reply::Rejected("too risky".into()),
                "rejected by review: too risky".to_owned(),
                true,
            ),
            (
                Reply::Invalid("bad.".into()),
                format!("bad.. {DO_NOT_RETRY}"),
                true,
            ),
            (
                Reply::depth_limit(),
                format!("Agent depth limit reached. Solve the task yourself. {DO_NOT_RETRY}"),
                true,
            ),
            (
                Reply::unknown_tool("x", &["a".into(), "b".into()]),
                format!(
                    "unknown tool x; the tools you have are: a, b. Call only one of these. {DO_NOT_RETRY}"
                ),
                true,
            ),
        ];
        for (reply, text, error) in table {
            assert_eq!(reply.is_error(), error, "{reply:?}");
            assert_eq!(reply.into_text(), text);
        }
    }

    /// Each call of an answer, in order: `submit_result` decided here (accepted, refused, or
    /// refused once too often), anything else handed to the driver.
    #[test]
    fn calls_are_taken_in_order_and_submit_is_decided_here() {
        let roomy = Bounds {
            tool_result_bytes: 4096,
            ..bounds(5, 1)
        };
        let mut c = Conversation::new("", "p", None, roomy);
        let call = |name: &str, args: &str| ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: args.into(),
        };
        assert_eq!(c.take_call(&call("task", "{}")), CallStep::Run);
        let CallStep::Answered(text) = c.take_call(&call(SUBMIT_RESULT, "{}")) else {
            panic!("a refused result is answered here")
        };
        assert_eq!(
            text,
            format!("the arguments have no \"result\". {DO_NOT_RETRY}")
        );
        assert!(
            matches!(c.messages().last(), Some(Message::Tool { content, .. }) if *content == text)
        );
        assert!(matches!(
            c.take_call(&call(SUBMIT_RESULT, "nope")),
            CallStep::Failed(r) if r.starts_with("output invalid after 2 attempts")
        ));
        let mut ok = Conversation::new("", "p", None, bounds(5, 1));
        assert_eq!(
            ok.take_call(&call(SUBMIT_RESULT, r#"{"result": "r"}"#)),
            CallStep::Done("r".into())
        );
        let body = ok.request("m", &[], Some("high"));
        assert_eq!(body["model"], "m");
        assert_eq!(body["stream"], true);
        assert_eq!(body["reasoning_effort"], "high");
        assert!(body.get("tools").is_none());
        assert_eq!(body["messages"][0], json!({"role": "user", "content": "p"}));
    }

    #[test]
    fn truncated_answers_fail_and_sizes_are_bounded() {
        let mut c = Conversation::new("", "p", None, bounds(5, 2));
        let cut = Answer {
            content: "half an ans".into(),
            finish_reason: Some("length".into()),
            ..Answer::default()
        };
        assert!(matches!(c.answer(cut), Step::Failed(r) if r.contains("finish_reason: length")));
        let filtered = Answer {
            finish_reason: Some("content_filter".into()),
            ..Answer::default()
        };
        assert!(matches!(c.answer(filtered), Step::Failed(r) if r.contains("content_filter")));
        assert_eq!(
            c.answer(text(&"x".repeat(33))),
            Step::Failed(
                "the result is 33 bytes; the limit (executor.max_output_bytes) is 32".into()
            )
        );
        assert!(matches!(
            c.submit(&json!({"result": "y".repeat(40)}).to_string()),
            Submitted::Failed(r) if r.starts_with("the result is 40 bytes")
        ));
        c.tool_result("c1", Reply::Answer("é".repeat(20)));
        let Some(Message::Tool { content, .. }) = c.messages().last() else {
            panic!("no tool message")
        };
        assert_eq!(
            content,
            &format!(
                "{}\n[cut: the tool returned 40 bytes; only the first 16 are shown (model.max_tool_result_bytes)]",
                "é".repeat(8)
            )
        );
    }

    fn text(s: &str) -> Answer {
        Answer {
            content: s.to_owned(),
            ..Answer::default()
        }
    }

    #[test]
    fn a_plain_answer_ends_the_run_and_the_budget_is_counted() {
        let mut c = Conversation::new("sys", "do it", None, bounds(2, 2));
        assert_eq!(c.begin_turn(), Ok(1));
        assert_eq!(c.answer(text("done")), Step::Done("done".into()));
        assert_eq!(c.begin_turn(), Ok(2));
        assert_eq!(c.begin_turn(), Err("max turns (2) reached".into()));
        let roles: Vec<_> = c
            .messages()
            .iter()
            .map(|m| serde_json::to_value(m).unwrap()["role"].clone())
            .collect();
        assert_eq!(roles, [json!("system"), json!("user"), json!("assistant")]);
    }

    #[test]
    fn tool_calls_are_echoed_and_answered_in_order() {
        let mut c = Conversation::new("", "p", None, bounds(5, 2));
        let call = ToolCall {
            id: "c1".into(),
            name: "task".into(),
            arguments: "{}".into(),
        };
        let step = c.answer(Answer {
            tool_calls: vec![call.clone()],
            ..Answer::default()
        });
        assert_eq!(step, Step::Tools(vec![call]));
        c.tool_result("c1", Reply::Answer("ok".into()));
        let last = serde_json::to_value(c.messages().last().unwrap()).unwrap();
        assert_eq!(
            last,
            json!({"role": "tool", "tool_call_id": "c1", "content": "ok"})
        );
        let asked = serde_json::to_value(&c.messages()[1]).unwrap();
        assert_eq!(asked["content"], Value::Null);
        assert_eq!(asked["tool_calls"][0]["function"]["name"], "task");
    }

    #[test]
    fn submit_result_is_validated_and_retries_are_bounded() {
        let schema =
            json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}});
        let mut c = Conversation::new("", "p", Some(schema), bounds(9, 2));
        let Submitted::Refused(why) = c.submit(r#"{"result": {"n": "x"}}"#) else {
            panic!("accepted an invalid result")
        };
        assert!(why.contains("/n"), "{why}");
        assert!(matches!(c.submit("not json"), Submitted::Refused(_)));
        let Submitted::Failed(reason) = c.submit(r#"{"result": {}}"#) else {
            panic!("a third invalid result must fail the run")
        };
        assert!(
            reason.starts_with("output invalid after 3 attempts: "),
            "{reason}"
        );
        let mut ok = Conversation::new("", "p", None, bounds(9, 0));
        assert_eq!(
            ok.submit(r#"{"result": "plain"}"#),
            Submitted::Done("plain".into())
        );
    }

    #[test]
    fn a_plain_answer_must_match_the_schema() {
        let schema = json!({"type": "object", "required": ["n"]});
        let mut c = Conversation::new("", "p", Some(schema), bounds(9, 1));
        assert_eq!(c.answer(text("no json")), Step::Again);
        assert!(
            matches!(c.messages().last(), Some(Message::User { content }) if content.contains(SUBMIT_RESULT))
        );
        assert_eq!(
            c.answer(text(r#"{"n": 1}"#)),
            Step::Done(r#"{"n":1}"#.into())
        );
        assert!(
            matches!(c.answer(text("[]")), Step::Failed(r) if r.starts_with("output invalid after 2 attempts"))
        );
    }
}
