//! The values one `tools/call` carries from stage to stage: what arrived
//! (`CallRequest`), split by admit into the call's `Context` and the `Call`;
//! how a stage ends it early (`Stop`); what the caller gets (`Answer`); and
//! the conclusions that later stages read — approve's `Gate` and reserve's
//! `Held` — and what each of those two stages tells the pipeline in one value
//! (`Approved`, `Reserved`). Stages import these, never each other.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use toolgate_core::Decision;
use toolgate_core::approval::ApprovalState;
use toolgate_core::approval::Binding;
use toolgate_core::operation::Operation;
use toolgate_core::receipt::OperationRef;
use toolgate_core::{Caller, Refusal};

use crate::commit::Committed;
use toolgate_mcp::upstream::ProgressRelay;
use toolgate_mcp::wire::{Era, Id, RawObject, RpcError};

/// A `tools/call` as it arrived from either edge: who sent it and how,
/// and the call itself. Admit builds the call's `Context` from it.
#[derive(Clone)]
pub struct CallRequest {
    /// Who is calling, from the request's credentials.
    pub caller: Arc<Caller>,
    /// The trace context the request carried in `_meta`.
    pub trace: BTreeMap<String, String>,
    /// The JSON-RPC id of the request.
    pub request_id: Option<Id>,
    /// Which MCP era the request speaks (2026-07-28 or legacy).
    pub era: Era,
    /// What it asks for.
    pub call: Call,
}

/// The call's context: who calls, in which era, under which trace, since
/// when. One value, built once by admit (`admit::context`) and read by every
/// stage that needs it.
pub struct Context {
    /// Who is calling, from the request's credentials.
    pub caller: Arc<Caller>,
    /// Which MCP era the request speaks.
    pub era: Era,
    /// The trace context the request carried in `_meta`.
    pub trace: BTreeMap<String, String>,
    /// The JSON-RPC id of the request.
    pub request_id: Option<Id>,
    /// The instant the call began, on the one clock (ms since the epoch).
    pub began_ms: i64,
    /// The same instant, monotonic: how long the call took is measured from it.
    pub started: Instant,
}

/// What the call asks for: the tool, its arguments, and what came with them.
#[derive(Clone)]
pub struct Call {
    /// A tool's call, or a prompt get or resource read on the same path.
    pub kind: toolgate_mcp::upstream::Kind,
    /// The exposed tool name (`SERVER__TOOL`); a prompt's; a resource's exposed URI.
    pub name: String,
    /// The arguments as sent (an object).
    pub arguments: Value,
    /// Set when the client asked for progress and the transport can carry it.
    pub progress: Option<ProgressRelay>,
    /// The stream back to the client, while it listens (closed once it has
    /// gone away); none where the transport cannot tell.
    pub client: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    /// `inputResponses` / `requestState` of a re-issued call (MRTR).
    pub input: Map<String, Value>,
    /// `_meta["io.toolgate/operationKey"]`, as sent.
    pub operation_key: Option<Value>,
    /// The client's declared capabilities, to ask only for input it can give.
    pub client_capabilities: Option<Value>,
    /// `_meta["io.toolgate/preview"]: true`: decide, and say how, but open
    /// no approval, reserve nothing, send nothing, record no receipt.
    pub preview: bool,
    /// `_meta["io.toolgate/deadlineMs"]`, as sent: the caller's own cap on
    /// the upstream call, which may lower the server's deadline, never raise it.
    pub deadline_ms: Option<Value>,
    /// `_meta["io.toolgate/run"]`, as sent: the agent run the call is part of.
    pub run: Option<Value>,
    /// The MCP session of the request, where the transport has one.
    pub session: Option<Arc<str>>,
    /// The caller's own inbound OAuth access token, where it came with one
    /// (`[oauth]`): an exchange's subject token. Never sent to a server.
    pub inbound_token: Option<Arc<str>>,
    /// Cancelled when the client cancels the call while it is held (a
    /// `notifications/cancelled` naming it, `cancels.rs`): the hold ends at once.
    pub cancelled: tokio_util::sync::CancellationToken,
}

impl Call {
    /// The caller's own deadline for the upstream call, if it sent one; the
    /// refusal if what it sent cannot be one.
    pub fn deadline(&self) -> Result<Option<std::time::Duration>, Refusal> {
        match &self.deadline_ms {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64().filter(|ms| (1..=86_400_000).contains(ms)) {
                Some(ms) => Ok(Some(std::time::Duration::from_millis(ms))),
                None => Err(Refusal::new(
                    toolgate_core::Verdict::Allow,
                    toolgate_core::Reason::InvalidArguments,
                    toolgate_core::Action::Correct,
                    "_meta[\"io.toolgate/deadlineMs\"] must be an integer number of milliseconds from 1 to 86400000; nothing was run",
                )),
            },
        }
    }

    /// The run the caller named (`_meta["io.toolgate/run"]`), if it named
    /// one; the refusal if what it sent cannot be one.
    pub fn named_run(&self) -> Result<Option<&str>, Refusal> {
        match &self.run {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(r))
                if (1..=200).contains(&r.chars().count()) && !r.chars().any(char::is_control) =>
            {
                Ok(Some(r))
            }
            Some(_) => Err(Refusal::new(
                toolgate_core::Verdict::Allow,
                toolgate_core::Reason::InvalidArguments,
                toolgate_core::Action::Correct,
                "_meta[\"io.toolgate/run\"] must be a string of 1 to 200 characters without control characters; nothing was run",
            )),
        }
    }

    /// The client's own operation key (`_meta["io.toolgate/operationKey"]`),
    /// if it sent one; the refusal if what it sent cannot be one.
    /// `approval:` and `auto:` are the gateway's own prefixes: a client key
    /// there could stand in for another call's approved operation.
    pub fn client_key(&self) -> Result<Option<&str>, Refusal> {
        match self.operation_key.as_ref() {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(k))
                if (1..=200).contains(&k.chars().count())
                    && !k.starts_with("approval:")
                    && !k.starts_with("auto:") =>
            {
                Ok(Some(k))
            }
            Some(_) => Err(Refusal::new(
                toolgate_core::Verdict::Allow,
                toolgate_core::Reason::InvalidArguments,
                toolgate_core::Action::Correct,
                "_meta[\"io.toolgate/operationKey\"] must be a string of 1 to 200 characters not \
                    starting with `approval:` or `auto:`; nothing was run",
            )),
        }
    }
}

/// How a stage ends a call early.
pub enum Stop {
    /// Refused, with what the caller can do next.
    Refused(Refusal),
    /// A complete answer that is not a tool's result (`input_required`).
    Input(RawObject),
    /// A JSON-RPC error, where the protocol demands one.
    Error(RpcError),
}

/// What the caller gets.
pub enum Answer {
    /// The upstream's result, field values verbatim.
    Result(RawObject),
    /// A refusal, sent as a tool result with `isError`.
    Refused(Refusal),
    /// A JSON-RPC error.
    Error(RpcError),
}

/// An answer and where its receipts were placed in the log, which the
/// answer names (`_meta["io.toolgate/receipt"]`).
pub struct Recorded {
    /// The answer.
    pub answer: Answer,
    /// Its receipt, and a write's decision's; `None` for a preview, or
    /// when nothing was placed (the receipt could not be written).
    pub placed: Option<(toolgate_core::receipt::Placed, Option<toolgate_core::receipt::Placed>)>,
}

impl From<Stop> for Answer {
    fn from(stop: Stop) -> Self {
        match stop {
            Stop::Refused(r) => Answer::Refused(r),
            Stop::Input(o) => Answer::Result(o),
            Stop::Error(e) => Answer::Error(e),
        }
    }
}

/// The approve stage's conclusion: what the rest of the call runs under.
pub struct Gate {
    /// The approval this dispatch runs under.
    pub approval: Option<(String, Binding)>,
    /// `inputResponses` / `requestState` as the upstream must see them.
    pub input: Map<String, Value>,
    /// The approval presented was already used: only the operation it ran
    /// (reserve looks it up) can answer this call.
    pub used: bool,
}

impl Gate {
    /// The id of the approval this call runs under.
    pub fn approval_id(&self) -> Option<&str> {
        self.approval.as_ref().map(|(id, _)| id.as_str())
    }

    /// A used approval with no operation to answer for it.
    pub fn used_refusal(&self, exposed: &str) -> Refusal {
        let r = toolgate_core::approval::refusal(toolgate_core::Reason::ApprovalUsed, exposed);
        match self.approval_id() {
            Some(id) => r.with_approval(id),
            None => r,
        }
    }
}

/// The reserve stage's conclusion: what dispatch does next.
pub enum Held {
    /// A read: nothing to record.
    Read,
    /// This call holds the operation and may send it.
    Mine(Operation),
    /// The recorded outcome; `checked` is false for a reconciler's finding,
    /// which is not the tool's own result.
    Replay {
        /// The operation whose outcome this is.
        op: Operation,
        /// The outcome as recorded.
        raw: Box<RawValue>,
        /// Whether it is the tool's own result (checked against its outputSchema).
        checked: bool,
    },
}

impl Held {
    /// The operation this call holds or replays; none for a read.
    pub fn operation(&self) -> Option<&Operation> {
        match self {
            Held::Read => None,
            Held::Mine(op) | Held::Replay { op, .. } => Some(op),
        }
    }
}

/// All the approve stage concluded, matched once by the pipeline.
pub struct Approved {
    /// What the rest of the call runs under, or how it ends.
    pub gate: Result<Gate, Stop>,
    /// The approval the call runs under, or the one it opened or waited on.
    pub approval_id: Option<String>,
    /// The wait's receipt, committed with the approval this call opened,
    /// while it is still the receipt of this call's answer.
    pub committed: Option<Committed>,
    /// Decided again, as the approval stood once it was approved during the
    /// hold (the state policy saw, and the decision).
    pub redecided: Option<(Option<ApprovalState>, Decision)>,
    /// The answer is a question for the person at the client.
    pub input_required: bool,
}

/// All the reserve stage concluded — with the dispatch it guards — matched
/// once by the pipeline.
pub struct Reserved {
    /// The upstream's answer, or how the call ends.
    pub result: Result<Dispatched, Stop>,
    /// The last of the write's receipts committed with its operation.
    pub committed: Option<Committed>,
    /// The operation's key and state as last recorded.
    pub operation_ref: Option<OperationRef>,
    /// The operation this call ran or replayed: (id, replayed).
    pub operation: Option<(String, bool)>,
    /// The call went upstream (its outcome deserves a receipt).
    pub dispatched: bool,
}

/// What a dispatch (or a replay standing in for one) brought back.
pub enum Dispatched {
    /// The tool's own result: checked against its outputSchema.
    Result(Box<RawValue>),
    /// A reconciler's finding, which is not the tool's result: answered as
    /// recorded, unchecked.
    Finding(RawObject),
}

/// check: what was found in the result (the answer is given beside it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checked {
    /// The tool said it failed (`isError`).
    pub tool_error: bool,
    /// The upstream asks for input (MRTR): there is no result yet.
    pub input_required: bool,
    /// How many places of `structuredContent` violate the outputSchema.
    pub output_violations: usize,
}
