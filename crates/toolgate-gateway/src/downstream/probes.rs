//! What an orchestrator asks: `GET /healthz` (the process answers) and
//! `GET /readyz` (it can serve calls: the ledger answers within a second,
//! and at least one upstream's tools are listed). Neither needs a token,
//! so neither says more than states: no upstream URL, no error text — an
//! operator reads those in the logs or with `toolgate tools`.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use toolgate_core::approval::ApprovalState;

use crate::gateway::Gateway;

/// How long readiness waits for the ledger before it calls it unreachable.
const LEDGER_WITHIN: Duration = Duration::from_secs(1);

pub(crate) fn routes() -> axum::Router<Arc<Gateway>> {
    axum::Router::new()
        .route("/healthz", axum::routing::get(healthz))
        .route("/readyz", axum::routing::get(readyz))
}

async fn healthz() -> Response {
    (StatusCode::OK, Json(json!({"status": "alive"}))).into_response()
}

async fn readyz(State(gw): State<Arc<Gateway>>) -> Response {
    // A read every replica does anyway: the pending approvals' count.
    let ledger = matches!(
        tokio::time::timeout(LEDGER_WITHIN, gw.ledger.count_approvals(ApprovalState::Pending))
            .await,
        Ok(Ok(_))
    );
    let upstreams: Map<String, Value> = gw
        .catalogs
        .upstreams()
        .iter()
        .map(|u| (u.name.clone(), json!(if u.listing().is_some() { "ready" } else { "down" })))
        .collect();
    let serving = upstreams.values().any(|s| s == "ready");
    let ready = ledger && serving;
    let body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "ledger": if ledger { "reachable" } else { "unreachable" },
        // The gateway does not start without its signing keys.
        "keys": "loaded",
        "upstreams": upstreams,
    });
    (if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, Json(body))
        .into_response()
}
