//! The approvers' HTTP API, beside `/mcp` on the same listener and behind
//! the same Host/Origin checks. Only a caller with the `approver` role may
//! use it; agents' tokens get 403. The approver is the authenticated
//! caller, never a name in the body, and can never decide its own call.
//! Everything is the approver's own tenant's: another tenant's approval or
//! operation is "not found" (404), never listed.
//!
//! - `GET  /admin/approvals[?state=pending]`
//! - `GET  /admin/approvals/{id}`
//! - `POST /admin/approvals/{id}/approve` `{"reason": "…"}`
//! - `POST /admin/approvals/{id}/deny`    `{"reason": "…"}`
//! - `GET  /admin/operations[?state=unknown]`
//! - `GET  /admin/operations/{id}`
//! - `POST /admin/operations/{id}/reconcile` (asks the configured read tool)

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use toolgate_core::approval::ApprovalState;
use toolgate_core::operation::OperationState;
use toolgate_ledger::LedgerError;

use super::edge::{Approver, plain};
use crate::gateway::{DecideError, Gateway};

pub(crate) fn routes() -> axum::Router<Arc<Gateway>> {
    axum::Router::new()
        .route("/admin/approvals", axum::routing::get(list))
        .route("/admin/approvals/{id}", axum::routing::get(show))
        .route("/admin/approvals/{id}/{verdict}", axum::routing::post(decide))
        .route("/admin/operations", axum::routing::get(operations))
        .route("/admin/operations/{id}", axum::routing::get(operation))
        .route("/admin/operations/{id}/reconcile", axum::routing::post(reconcile))
}

/// The HTTP status of a ledger's refusal (404 not found, 409 not in that
/// state, 403 your own call, 503 the store failed), for the admin API and
/// any other route that reports one.
pub fn store_error_status(e: &LedgerError) -> StatusCode {
    match e {
        LedgerError::NotFound(_)
        | LedgerError::OperationNotFound(_)
        | LedgerError::NoticeNotFound(_) => StatusCode::NOT_FOUND,
        LedgerError::NotPending { .. }
        | LedgerError::NotApproved { .. }
        | LedgerError::Expired(_)
        | LedgerError::WrongState { .. } => StatusCode::CONFLICT,
        LedgerError::SelfApproval { .. } => StatusCode::FORBIDDEN,
        LedgerError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

fn store_error(e: LedgerError) -> Response {
    (store_error_status(&e), Json(json!({"error": e.to_string()}))).into_response()
}

#[derive(Deserialize)]
struct ListQuery {
    state: Option<String>,
    /// Operations only: at most this many, the newest ([`LIST_LIMIT`] by
    /// default; a week of them is kept).
    limit: Option<usize>,
}

/// The operations a list gives by default, and at most.
const LIST_LIMIT: (usize, usize) = (1_000, 10_000);

/// `?state=…`, parsed; an unknown state is a 400 that lists the known ones.
fn state_filter<S>(
    q: &ListQuery,
    parse: fn(&str) -> Option<S>,
    known: &str,
) -> Result<Option<S>, Response> {
    match q.state.as_deref() {
        None => Ok(None),
        Some(s) => parse(s).map(Some).ok_or_else(|| {
            plain(StatusCode::BAD_REQUEST, &format!("unknown state `{s}`; use {known}"))
        }),
    }
}

async fn list(
    Approver(caller): Approver,
    State(gw): State<Arc<Gateway>>,
    Query(q): Query<ListQuery>,
) -> Response {
    let state = match state_filter(
        &q,
        ApprovalState::parse,
        "pending, approved, denied, expired or consumed",
    ) {
        Ok(s) => s,
        Err(r) => return r,
    };
    match gw.ledger.approvals(Some(&caller.tenant), state, gw.clock.now_ms()).await {
        Ok(all) => Json(json!({"approvals": all})).into_response(),
        Err(e) => store_error(e),
    }
}

async fn show(
    Approver(caller): Approver,
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
) -> Response {
    match gw.ledger.approval(&id).await {
        Ok(Some(a)) if a.binding.tenant == caller.tenant => {
            Json(a.as_of(gw.clock.now_ms())).into_response()
        }
        // Another tenant's approval does not exist for this approver.
        Ok(_) => store_error(LedgerError::NotFound(id)),
        Err(e) => store_error(e),
    }
}

#[derive(Deserialize)]
struct DecideBody {
    reason: String,
}

async fn decide(
    Approver(caller): Approver,
    State(gw): State<Arc<Gateway>>,
    Path((id, ruling)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let approve = match ruling.as_str() {
        "approve" => true,
        "deny" => false,
        _ => return plain(StatusCode::NOT_FOUND, "POST /admin/approvals/{id}/approve or /deny"),
    };
    let reason = match serde_json::from_slice::<DecideBody>(&body) {
        Ok(b) if !b.reason.trim().is_empty() => b.reason,
        _ => {
            return plain(
                StatusCode::BAD_REQUEST,
                "send a JSON body {\"reason\": \"…\"}; every decision records why",
            );
        }
    };
    match gw.decide_approval(&caller, &id, approve, &reason).await {
        Ok(a) => Json(a).into_response(),
        Err(DecideError::Ledger(e)) => store_error(e),
        Err(e @ DecideError::NoReason) => plain(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

async fn operations(
    Approver(caller): Approver,
    State(gw): State<Arc<Gateway>>,
    Query(q): Query<ListQuery>,
) -> Response {
    let states = OperationState::ALL.map(OperationState::as_str).join(", ");
    let state = match state_filter(&q, OperationState::parse, &states) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let limit = q.limit.unwrap_or(LIST_LIMIT.0);
    if limit > LIST_LIMIT.1 {
        return plain(
            StatusCode::BAD_REQUEST,
            &format!("limit is at most {}; narrow the list with ?state=…", LIST_LIMIT.1),
        );
    }
    match gw.ledger.operations(Some(&caller.tenant), state, gw.clock.now_ms(), limit).await {
        Ok(all) => Json(json!({"operations": all, "limit": limit})).into_response(),
        Err(e) => store_error(e),
    }
}

async fn operation(
    Approver(caller): Approver,
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
) -> Response {
    match gw.ledger.operation(&id).await {
        Ok(Some(op)) if op.key.tenant == caller.tenant => Json(op).into_response(),
        Ok(_) => store_error(LedgerError::OperationNotFound(id)),
        Err(e) => store_error(e),
    }
}

async fn reconcile(
    Approver(caller): Approver,
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
) -> Response {
    match gw.ledger.operation(&id).await {
        Ok(Some(op)) if op.key.tenant == caller.tenant => {}
        Ok(_) => return store_error(LedgerError::OperationNotFound(id)),
        Err(e) => return store_error(e),
    }
    match crate::reconcile::reconcile(&gw, &id).await {
        Ok(done) => Json(json!({"operation": done.operation, "applied": done.applied, "evidence": done.evidence})).into_response(),
        // Nothing was settled: say why (not found, not unknown, no rule, the read failed).
        Err(e) => (StatusCode::CONFLICT, Json(json!({"error": format!("{e:#}")}))).into_response(),
    }
}
