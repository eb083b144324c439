//! Reconciliation: an operation whose outcome is unknown (sent, then no
//! answer) is settled by looking for its effect with a read tool the host
//! names, e.g. `create_ticket` → `get_ticket {client_reference}`:
//!
//! ```toml
//! [registry."support__create_ticket".reconcile]
//! tool = "get_ticket"
//! arguments = { client_reference = "client_reference" }
//! found = "/found"
//! ```
//!
//! Found: the operation is `reconciled_applied`, and a retry with its key
//! gets the evidence. Not found: `reconciled_not_applied`, and a retry with
//! its key runs it. A read that fails settles nothing.

use anyhow::{Context as _, anyhow, bail};
use serde_json::{Map, Value, json};
use toolgate_core::operation::{Operation, OperationState};
use toolgate_ledger::Resolution;

use crate::config::{Config, ReconcileConfig};
use crate::gateway::Gateway;
use toolgate_mcp::upstream::CallOptions;

/// What the read found, and the operation as settled.
pub struct Reconciled {
    /// The operation, now `reconciled_applied` or `reconciled_not_applied`.
    pub operation: Operation,
    /// Whether the read found the write's effect.
    pub applied: bool,
    /// The read tool's `structuredContent`.
    pub evidence: Value,
}

/// What a retry with the key of an operation settled as applied gets: a
/// result saying so, with the evidence found (not the tool's own result).
pub fn settled_outcome(id: &str, message: &str, evidence: &Value) -> String {
    json!({
        "content": [{"type": "text", "text": message}],
        "structuredContent": {"reconciled": true, "operation": id, "evidence": evidence},
    })
    .to_string()
}

/// The configured way to find `op`'s effect.
pub fn rule(config: &Config, op: &Operation) -> anyhow::Result<ReconcileConfig> {
    let exposed = config.exposed_name(&op.key.server, &op.key.tool);
    config.registry.get(&exposed).and_then(|e| e.reconcile.clone()).ok_or_else(|| {
        anyhow!(
            "no [registry.\"{exposed}\".reconcile] is configured; check the upstream by hand and \
                settle it with `toolgate ops resolve --config FILE {} --applied|--not-applied --as \
                NAME --reason TEXT`",
            op.id
        )
    })
}

/// Settles the unknown operation `id` by its rule's read, with a receipt.
/// An error (not unknown, no rule, the read failed or has no boolean at
/// `found`) settles nothing.
pub async fn reconcile(gw: &Gateway, id: &str) -> anyhow::Result<Reconciled> {
    // Listing marks lapsed dispatches unknown first.
    let unknown = gw
        .ledger
        .operations(None, Some(OperationState::Unknown), gw.clock.now_ms(), usize::MAX)
        .await?;
    let Some(op) = unknown.into_iter().find(|o| o.id == id) else {
        let op = gw
            .ledger
            .operation(id)
            .await?
            .ok_or_else(|| anyhow!("no operation `{id}`; `toolgate ops list` shows them"))?;
        bail!("operation `{id}` is {}; only an unknown operation is reconciled", op.state.as_str());
    };
    let rule = rule(&gw.config(), &op)?;
    let mut arguments = Map::new();
    for (read_arg, write_arg) in &rule.arguments {
        let value = op.arguments.get(write_arg).ok_or_else(|| {
            anyhow!("operation `{id}` has no argument `{write_arg}` to look its effect up by")
        })?;
        arguments.insert(read_arg.clone(), value.clone());
    }
    let upstream = gw
        .catalogs
        .upstream(&op.key.server)
        .ok_or_else(|| anyhow!("the server `{}` is not configured", op.key.server))?;
    let within = std::time::Duration::from_millis(gw.config().timeout_ms(&op.key.server));
    upstream.ready(within).await;
    let raw = upstream
        .call(
            toolgate_mcp::upstream::Kind::Tool,
            &rule.tool,
            &Value::Object(arguments),
            CallOptions::default(),
        )
        .await
        .map_err(|e| {
            anyhow!(
                "{}/{} could not be read ({e}); the operation stays unknown, try again",
                op.key.server,
                rule.tool
            )
        })?;
    let result: Value =
        serde_json::from_str(raw.get()).context("the read tool's answer is not JSON")?;
    if result["isError"] == json!(true) {
        bail!(
            "{}/{} answered with an error; the operation stays unknown: {}",
            op.key.server,
            rule.tool,
            result["content"]
        );
    }
    let evidence = result.get("structuredContent").cloned().unwrap_or(Value::Null);
    let applied = match evidence.pointer(&rule.found) {
        Some(Value::Bool(b)) => *b,
        other => bail!(
            "{}/{}'s result has no boolean at `{}` (found {other:?}); the operation stays unknown",
            op.key.server,
            rule.tool,
            rule.found
        ),
    };
    let outcome = applied.then(|| {
        let message = format!(
            "The reply to operation {id} was lost; reconciliation with {} found its effect. It ran \
                once; do not run it again.",
            rule.tool
        );
        settled_outcome(id, &message, &evidence)
    });
    let by = format!("reconciler:{}", rule.tool);
    let state = if applied {
        toolgate_core::operation::OperationState::ReconciledApplied
    } else {
        toolgate_core::operation::OperationState::ReconciledNotApplied
    };
    let receipt = Some(gw.log.settlement(&op, state, &by, outcome.as_deref()));
    let resolution = Resolution {
        applied,
        by,
        reason: format!(
            "{} {} the effect",
            rule.tool,
            if applied { "found" } else { "did not find" }
        ),
        outcome,
        now_ms: gw.clock.now_ms(),
        receipt,
    };
    let operation = gw.ledger.resolve_operation(id, resolution).await?;
    gw.log.appended(1);
    tracing::info!(target: "toolgate::operation", operation = %id, applied, "operation reconciled");
    Ok(Reconciled { operation, applied, evidence })
}

/// A person's finding on operation `id`, recorded with a receipt: `applied`
/// settles it `reconciled_applied` (a retry with its key gets this finding),
/// otherwise `reconciled_not_applied` (the key may run again; refused while
/// its lease runs). The CLI (`ops resolve`) and the console both come here.
pub async fn resolve_by_hand(
    ledger: &dyn toolgate_ledger::Ledger,
    log: &crate::log::receipt_log::ReceiptLog,
    id: &str,
    applied: bool,
    by: &str,
    reason: &str,
    now_ms: i64,
) -> anyhow::Result<Operation> {
    if reason.trim().is_empty() {
        bail!("say why: the reason is recorded with the settlement");
    }
    let current = ledger
        .operation(id)
        .await?
        .ok_or_else(|| anyhow!("no operation `{id}`; `toolgate ops list` shows them"))?;
    let outcome = applied.then(|| {
        let message = format!("The reply to operation {id} was lost; {by} confirmed it took effect: {reason}. It ran once; do not run it again.");
        settled_outcome(id, &message, &json!({"resolved_by": by, "reason": reason}))
    });
    let state = if applied {
        OperationState::ReconciledApplied
    } else {
        OperationState::ReconciledNotApplied
    };
    let receipt = Some(log.settlement(&current, state, by, outcome.as_deref()));
    let resolution = Resolution {
        applied,
        by: by.to_string(),
        reason: reason.to_string(),
        outcome,
        now_ms,
        receipt,
    };
    let op = ledger.resolve_operation(id, resolution).await?;
    log.appended(1);
    tracing::info!(target: "toolgate::operation", operation = %id, applied, by, "operation resolved by hand");
    Ok(op)
}
