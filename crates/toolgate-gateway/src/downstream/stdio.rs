//! The downstream stdio edge: one agent on our stdin/stdout, newline-
//! delimited JSON-RPC. Lines are bounded like HTTP bodies; requests run
//! concurrently and their answers are written whole, one per line.

use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use toolgate_core::strict_json::{self, JsonError};

use super::{Reply, check_modern_meta, handle, inbound};
use crate::gateway::Gateway;
use toolgate_mcp::lines::{BoundedLines, Line};
use toolgate_mcp::wire::{self, Era, RpcError, code};

/// Serves the agent on stdin/stdout as `gateway.stdio_caller` (or the
/// anonymous caller); with neither, stdio is refused before reading a line.
pub async fn serve(gw: Arc<Gateway>) -> std::io::Result<()> {
    let Some(caller) = gw.callers.stdio() else {
        return Err(std::io::Error::other(
            "stdio needs a caller: set gateway.stdio_caller to a [callers] entry, or open an anonymous caller",
        ));
    };
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = out_rx.recv().await {
            stdout.write_all(line.as_bytes()).await?;
            stdout.write_all(b"\n").await?;
            stdout.flush().await?;
        }
        Ok::<_, std::io::Error>(())
    });
    // Legacy clients learn of list changes unprompted.
    let legacy_seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let notifier = {
        let (gw, out, legacy_seen) = (gw.clone(), out_tx.clone(), legacy_seen.clone());
        tokio::spawn(async move {
            super::listen::follow_lists(&gw, |m| {
                !legacy_seen.load(std::sync::atomic::Ordering::Relaxed) || out.send(m).is_ok()
            })
            .await;
        })
    };
    // The connection is also the legacy session its subscriptions are about.
    let subscriber = crate::sessions::Session::new(&caller.name, Some(out_tx.clone()), None);
    // The connection is the session: a call naming no run is in its run.
    let session: Arc<str> = format!("stdio-{}", toolgate_core::entropy::random_token()).into();
    let mut lines = BoundedLines::new(tokio::io::stdin(), gw.limits.max_bytes);
    // Set by an `initialize`: this connection speaks the legacy era, and
    // its client declared these capabilities.
    let mut legacy = false;
    let mut capabilities: Option<serde_json::Value> = None;
    while let Some(line) = lines.next_line().await? {
        let line = match line {
            Line::Text(l) => l,
            Line::TooLong(_) => {
                let _ = out_tx.send(wire::error_response(
                    None,
                    &RpcError::new(
                        code::INVALID_REQUEST,
                        format!("message exceeds {} bytes", gw.limits.max_bytes),
                    ),
                ));
                continue;
            }
            Line::NotUtf8 => {
                let _ = out_tx.send(wire::error_response(
                    None,
                    &RpcError::new(code::PARSE_ERROR, "the message is not UTF-8"),
                ));
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let value = match strict_json::parse(line.as_bytes(), gw.limits) {
            Ok(v) => v,
            Err(e @ JsonError::Syntax(_)) => {
                let _ = out_tx.send(wire::error_response(
                    None,
                    &RpcError::new(code::PARSE_ERROR, e.to_string()),
                ));
                continue;
            }
            Err(e) => {
                let _ = out_tx.send(wire::error_response(
                    None,
                    &RpcError::new(code::INVALID_REQUEST, e.to_string()),
                ));
                continue;
            }
        };
        let msg = match inbound(value) {
            Ok(m) => m,
            Err((id, e)) => {
                let _ = out_tx.send(wire::error_response(id.as_ref(), &e));
                continue;
            }
        };
        if msg.method == "initialize" {
            capabilities = msg.params.get("capabilities").cloned();
            legacy = true;
            legacy_seen.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let has_modern_meta =
            msg.params.get("_meta").and_then(|m| m.get(wire::META_PROTOCOL_VERSION)).is_some();
        let era = if has_modern_meta || !legacy { Era::Modern } else { Era::Legacy };
        if era == Era::Modern
            && msg.id.is_some()
            && msg.method != "initialize"
            && let Err(e) = check_modern_meta(&msg.params)
        {
            let _ = out_tx.send(wire::error_response(msg.id.as_ref(), &e));
            continue;
        }
        let era = if msg.method == "initialize" { Era::Legacy } else { era };
        if era == Era::Legacy && super::subscribe::about_subscriptions(&msg.method) {
            if let Some(answer) = subscriber.answer(&gw, &msg) {
                let _ = out_tx.send(answer);
            }
            continue;
        }
        let mut msg = msg;
        if era == Era::Legacy && msg.method != "initialize" {
            super::subscribe::carry_capabilities(&mut msg, capabilities.clone());
        }
        let (gw, out, caller, session) =
            (gw.clone(), out_tx.clone(), caller.clone(), session.clone());
        tokio::spawn(async move {
            let peer = super::Peer {
                transport: "pipe",
                address: None,
                session: Some(session),
                inbound_token: None,
            };
            if let Reply::Json(body) | Reply::NotFound(body) | Reply::BadRequest(body) =
                handle(&gw, msg, era, caller, &peer, Some(out.clone())).await
            {
                let _ = out.send(body);
            }
        });
    }
    // The client closed its input: stop notifying; the writer ends once the
    // calls still running have answered.
    notifier.abort();
    drop((subscriber, out_tx));
    writer.await.map_err(std::io::Error::other)?
}
