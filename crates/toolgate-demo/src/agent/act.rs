//! One tool call of the agent, read by toolgate's refusal contract: what
//! the answer means for the run, and what the model is told.
//!
//! - a result → the model gets its content;
//! - `correct` → the refusal (reason, paths) goes back so the model fixes
//!   its arguments;
//! - `retry` → wait `retry_after_ms` and send again (a few times);
//! - `escalate` with an approval → say who must decide and wait, sending the
//!   same call again (the gateway holds it while the approval is pending)
//!   until it is decided or the wait ends;
//! - `reconcile` → never sent again: the operation id is reported;
//! - `refused` → the model is told it cannot do that.

use std::io::Write as _;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use rmcp::model::{ClientConfig, ProgressNotificationParam};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, Peer, RoleClient};

use crate::demo::client::{Got, call_with_meta};

/// The agent's MCP client: it cannot ask a person anything (a call
/// waiting for an approver is answered with the refusal naming it), and it
/// shows the gateway's progress while a call is held for an approver.
#[derive(Default)]
pub struct Watcher {
    /// The approval the call in flight waits for, as the progress said.
    waiting: std::sync::Mutex<Option<(String, Instant)>>,
}

impl Watcher {
    /// The approval the last call waited for, if it waited.
    fn take(&self) -> Option<String> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).take().map(|(id, _)| id)
    }
}

impl ClientHandler for Watcher {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        let Some(message) =
            params.message.as_deref().filter(|m| m.starts_with("waiting for a named approver"))
        else {
            return;
        };
        let Some(id) =
            message.split(|c: char| c.is_whitespace() || c == '(').find(|w| w.starts_with("apr_"))
        else {
            return;
        };
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        match &*waiting {
            Some((seen, since)) if seen == id => {
                print!("\r    waiting {} s for approval {id} …", since.elapsed().as_secs());
                let _ = std::io::stdout().flush();
            }
            _ => {
                let why = message
                    .split_once(" (")
                    .and_then(|(_, r)| r.split_once(");"))
                    .map_or("", |(r, _)| r);
                println!("  ⏸ waiting for approval {id}: {why}");
                println!(
                    "    an approver decides with: toolgate approvals approve --config CONFIG {id} --as NAME --reason TEXT"
                );
                *waiting = Some((id.to_string(), Instant::now()));
            }
        }
    }
}

/// How one call ended, for the summary and the plan's expectations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The tool ran (perhaps after an approval): its result.
    Ran,
    /// The tool ran and said it failed (`isError` that is no refusal).
    ToolError,
    /// Refused with `correct`: the arguments must change.
    Correct,
    /// Refused with `refused`: the agent may not do this.
    Refused,
    /// Refused with `escalate` and no approval to wait for, or the wait ended.
    Escalate,
    /// `reconcile`: the outcome is unknown; never re-sent.
    Reconcile,
    /// `retry` more often than the agent retries.
    Retry,
    /// A protocol failure.
    Failed,
}

impl Ended {
    pub fn name(self) -> &'static str {
        match self {
            Ended::Ran => "ran",
            Ended::ToolError => "tool_error",
            Ended::Correct => "correct",
            Ended::Refused => "refused",
            Ended::Escalate => "escalate",
            Ended::Reconcile => "reconcile",
            Ended::Retry => "retry",
            Ended::Failed => "failed",
        }
    }
}

/// What a call came to: how it ended, what the model is told, and the
/// approval and operation it involved.
pub struct Acted {
    pub ended: Ended,
    pub for_model: String,
    pub approval: Option<String>,
    pub operation: Option<String>,
    pub line: String,
}

/// Limits of the waiting the contract asks for.
pub struct Patience {
    /// How long to wait for an approver, in all.
    pub approval: Duration,
    /// How often to send again after `retry`.
    pub retries: u32,
}

/// Sends `name(arguments)` as part of `run`, and follows the contract.
pub async fn act(
    client: &Peer<RoleClient>,
    watcher: &Watcher,
    run: &str,
    name: &str,
    arguments: &Value,
    patience: &Patience,
) -> Acted {
    let mut retries = 0;
    let mut waiting: Option<(String, Instant)> = None;
    loop {
        // Progress is asked for so that a call held for an approver says so.
        let meta =
            json!({"io.toolgate/run": run, "progressToken": format!("{run}-{}", next_token())});
        let got = call_with_meta(client, name, arguments, meta).await;
        let held_for = watcher.take();
        if held_for.is_some() {
            println!();
        }
        let refusal = got.refusal().cloned();
        let action = refusal
            .as_ref()
            .and_then(|r| r["action"].as_str())
            .map(str::to_string)
            .or_else(|| got.protocol_error_action())
            .unwrap_or_default();
        match action.as_str() {
            "retry" if retries < patience.retries => {
                retries += 1;
                let after = refusal
                    .as_ref()
                    .and_then(|r| r["retry_after_ms"].as_u64())
                    .unwrap_or(1000)
                    .clamp(50, 30_000);
                println!("  … {name}: retry in {after} ms ({})", reason(&refusal));
                tokio::time::sleep(Duration::from_millis(after)).await;
                continue;
            }
            "escalate" if got.approval_id().is_some() => {
                let id = got.approval_id().unwrap_or_default();
                let since = match &waiting {
                    Some((_, since)) => *since,
                    None => {
                        // Said already if the gateway's progress named it while the call was held.
                        if held_for.as_deref() != Some(id.as_str()) {
                            let why = refusal
                                .as_ref()
                                .and_then(|r| r["message"].as_str())
                                .unwrap_or("a named approver must decide");
                            println!("  ⏸ {name}: waiting for approval {id}: {why}");
                            println!(
                                "    an approver decides with: toolgate approvals approve --config CONFIG {id} --as NAME --reason TEXT"
                            );
                        }
                        Instant::now()
                    }
                };
                if since.elapsed() < patience.approval {
                    waiting = Some((id, since));
                    print!("\r    waiting {} s for approval …", since.elapsed().as_secs());
                    let _ = std::io::stdout().flush();
                    // The gateway holds the re-sent call while the approval is pending.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            }
            _ => {}
        }
        if waiting.is_some() {
            println!();
        }
        return acted(name, &got, refusal.as_ref(), waiting.map(|(id, _)| id).or(held_for));
    }
}

/// A fresh number for each call's progress token.
fn next_token() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn reason(refusal: &Option<Value>) -> String {
    refusal.as_ref().and_then(|r| r["reason"].as_str()).unwrap_or("?").to_string()
}

/// The answer, read: how it ended and what the model is told.
fn acted(name: &str, got: &Got, refusal: Option<&Value>, waited_for: Option<String>) -> Acted {
    let approval = got.approval_id().or(waited_for);
    let operation = match got {
        Got::Result(r) => r["_meta"]["io.toolgate/operation"]["id"].as_str().map(str::to_string),
        _ => None,
    }
    .or_else(|| refusal.and_then(|r| r["operation_id"].as_str()).map(str::to_string));
    let (ended, for_model) = match (got, refusal) {
        (Got::Result(r), None) if r["isError"] == true => (Ended::ToolError, content(r)),
        (Got::Result(r), None) => (Ended::Ran, content(r)),
        (_, Some(r)) => {
            let ended = match r["action"].as_str() {
                Some("correct") => Ended::Correct,
                Some("refused") => Ended::Refused,
                Some("reconcile") => Ended::Reconcile,
                Some("retry") => Ended::Retry,
                _ => Ended::Escalate,
            };
            let told = match ended {
                Ended::Correct => {
                    format!("toolgate refused the call; correct the arguments and call again: {r}")
                }
                Ended::Reconcile => format!(
                    "the outcome is unknown (operation {}); do NOT call it again: {r}",
                    operation.as_deref().unwrap_or("?")
                ),
                Ended::Refused => format!(
                    "toolgate refused the call; you may not do this, choose another way or stop: {r}"
                ),
                _ => format!("toolgate did not run the call: {r}"),
            };
            (ended, told)
        }
        (Got::Failed(msg, data), None) => match data.as_ref().and_then(|d| d["action"].as_str()) {
            Some("correct") => (
                Ended::Correct,
                format!(
                    "the call was refused; correct it: {msg} {}",
                    data.clone().unwrap_or_default()
                ),
            ),
            _ => (Ended::Failed, format!("the call failed: {msg}")),
        },
        (Got::Input(_), None) => {
            (Ended::Failed, "the tool asked for input this agent cannot give".into())
        }
    };
    let line = format!(
        "  {} {name} → {}{}",
        mark(ended),
        got.summary(),
        approval.as_ref().map(|a| format!(" [approval {a}]")).unwrap_or_default()
    );
    Acted { ended, for_model, approval, operation, line }
}

fn mark(ended: Ended) -> &'static str {
    match ended {
        Ended::Ran => "✓",
        Ended::Correct => "✎",
        Ended::Reconcile => "?",
        _ => "✗",
    }
}

/// A result as the model reads it: structured content if any, else the text.
fn content(result: &Value) -> String {
    match result.get("structuredContent") {
        Some(s) if !s.is_null() => s.to_string(),
        _ => result["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(action: &str, extra: Value) -> Got {
        let mut r =
            json!({"decision": "deny", "reason": "some_reason", "action": action, "message": "m"});
        r.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
        Got::Result(
            json!({"content": [{"type": "text", "text": "m"}], "structuredContent": r, "isError": true}),
        )
    }

    #[test]
    fn each_refusal_tells_the_model_what_the_contract_says() {
        let read = |got: &Got| acted("t", got, got.refusal(), None);
        let ran = read(&Got::Result(
            json!({"content": [], "structuredContent": {"order_id": "PO-1"}, "_meta": {"io.toolgate/operation": {"id": "op_1"}}}),
        ));
        assert_eq!(
            (ran.ended, ran.for_model.as_str(), ran.operation.as_deref()),
            (Ended::Ran, r#"{"order_id":"PO-1"}"#, Some("op_1"))
        );
        let fix = read(&refused("correct", json!({"violations": [{"path": "/quantity"}]})));
        assert_eq!(fix.ended, Ended::Correct);
        assert!(
            fix.for_model.contains("correct the arguments") && fix.for_model.contains("/quantity"),
            "{}",
            fix.for_model
        );
        let unknown = read(&refused("reconcile", json!({"operation_id": "op_9"})));
        assert_eq!((unknown.ended, unknown.operation.as_deref()), (Ended::Reconcile, Some("op_9")));
        assert!(unknown.for_model.contains("do NOT call it again"), "{}", unknown.for_model);
        assert_eq!(read(&refused("refused", json!({}))).ended, Ended::Refused);
        let escalated = read(&refused("escalate", json!({"approval_id": "apr_1"})));
        assert_eq!(
            (escalated.ended, escalated.approval.as_deref()),
            (Ended::Escalate, Some("apr_1"))
        );
        // A tool's own failure is no refusal; a protocol error with `correct` is one.
        let failed = read(&Got::Result(
            json!({"content": [{"type": "text", "text": "boom"}], "isError": true}),
        ));
        assert_eq!((failed.ended, failed.for_model.as_str()), (Ended::ToolError, "boom"));
        let unknown_tool =
            read(&Got::Failed("Unknown tool: x".into(), Some(json!({"action": "correct"}))));
        assert_eq!(unknown_tool.ended, Ended::Correct);
    }
}
