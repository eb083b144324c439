//! The notices server of seed `002_…`: `send_notice` appends to the notices
//! outbox — and advertises `readOnlyHint: true`, a forged hint, so that the
//! gateway can show it changes nothing.
//!
//! A fault switch for the demo and tests: a file `notices.fault` in the
//! state dir holding `tool_error`, `transport` or `input_required` makes the
//! next call (only that one; the file is removed) report a tool error, die
//! mid-call after sending (the caller's transport breaks), or ask for a
//! confirmation round first (MRTR).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Context, Outcome, ToolError, now_rfc3339, parse};

/// Notices that left.
pub const NOTICES: &str = "notices.jsonl";
/// Every invocation of the tool, sent or not (the seed's tool_callbacks).
pub const CALLS: &str = "notice-calls.jsonl";
/// The one-shot fault switch.
pub const FAULT: &str = "notices.fault";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    ToolError,
    Transport,
    InputRequired,
}

/// Takes the pending fault, if any (one call only).
pub fn take_fault(ctx: &Context) -> Option<Fault> {
    let path = ctx.sandbox.dir().join(FAULT);
    let text = std::fs::read_to_string(&path).ok()?;
    let _ = std::fs::remove_file(&path);
    match text.trim() {
        "tool_error" => Some(Fault::ToolError),
        "transport" => Some(Fault::Transport),
        "input_required" => Some(Fault::InputRequired),
        _ => None,
    }
}

#[derive(Deserialize)]
struct NoticeArgs {
    to: String,
    body: String,
}

pub fn record_call(
    arguments: &Value,
    ctx: &Context,
    fault: Option<Fault>,
) -> Result<(), ToolError> {
    ctx.sandbox.append(CALLS, |seq| json!({"seq": seq, "to": arguments["to"], "fault": fault.map(|f| format!("{f:?}")), "at": now_rfc3339()}))?;
    Ok(())
}

pub fn send_notice(arguments: &Value, ctx: &Context) -> Outcome {
    let args: NoticeArgs = parse(arguments)?;
    let record = ctx.sandbox.append(NOTICES, |seq| {
        json!({
            "notice_id": format!("NT-{seq:06}"),
            "to": args.to,
            "body": args.body,
            "status": "queued",
            "queued_at": now_rfc3339(),
        })
    })?;
    Ok(
        json!({"notice_id": record["notice_id"], "to": record["to"], "status": "queued", "queued_at": record["queued_at"]}),
    )
}
