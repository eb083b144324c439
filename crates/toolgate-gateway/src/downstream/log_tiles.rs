//! The receipt log over HTTP, as C2SP tlog-tiles lays it out, beside `/mcp`
//! on the same listener: any tlog-tiles client can mirror it, and
//! `toolgate verify --answer` proves an answer's receipt from it. An edge:
//! who may read is decided here, what is read is `log::published`'s.
//!
//! - `GET /log/checkpoint`: the newest signed checkpoint (a C2SP signed note;
//!   with the witnesses' cosignatures once they have cosigned it).
//! - `GET /log/tile/<L>/<N>[.p/<W>]`: a hash tile.
//! - `GET /log/tile/entries/<N>[.p/<W>]`: an entry bundle (each receipt's
//!   commitment; a receipt logged in the clear, before format 3, only to an
//!   admin).
//!
//! Who may read it is `receipts.log_access`: approvers (default), anyone,
//! or nobody (404). Tiles never change once written, so they are served
//! as immutable; the checkpoint is not cached.

use std::sync::Arc;

use axum::extract::{FromRequestParts as _, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use toolgate_core::tiles;

use super::edge::{Approver, host_and_origin, plain};
use crate::config::{ADMIN_ROLE, LogAccess};
use crate::gateway::Gateway;
use crate::log::published::{self, Unpublished};

pub(crate) fn routes() -> axum::Router<Arc<Gateway>> {
    axum::Router::new()
        .route("/log/checkpoint", axum::routing::get(checkpoint))
        .route("/log/tile/{*path}", axum::routing::get(tile))
}

/// The log's access rule, before anything is read: whether the reader
/// is an admin (who alone reads receipts logged in the clear).
async fn admit(gw: &Arc<Gateway>, request: Request) -> Result<bool, Response> {
    let (mut parts, _) = request.into_parts();
    match gw.config().receipts.log_access {
        LogAccess::Off => Err(plain(
            StatusCode::NOT_FOUND,
            "the log is not served here (receipts.log_access = \"off\")",
        )),
        LogAccess::Public => host_and_origin(gw, &parts.headers).map(|()| false),
        LogAccess::Approvers => Approver::from_request_parts(&mut parts, gw)
            .await
            .map(|Approver(caller)| caller.has_role(ADMIN_ROLE)),
    }
}

fn cache(public: bool, immutable: bool) -> HeaderValue {
    HeaderValue::from_static(match (public, immutable) {
        (_, false) => "no-cache",
        (true, true) => "public, max-age=31536000, immutable",
        (false, true) => "private, max-age=31536000, immutable",
    })
}

async fn checkpoint(State(gw): State<Arc<Gateway>>, request: Request) -> Response {
    if let Err(refused) = admit(&gw, request).await {
        return refused;
    }
    match published::served(&gw.log.published(), gw.log.witnesses.cosigned()).await {
        Ok(Some(note)) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8")),
                (header::CACHE_CONTROL, cache(false, false)),
            ],
            note,
        )
            .into_response(),
        Ok(None) => plain(
            StatusCode::NOT_FOUND,
            "no checkpoint has been signed yet; the first comes at most receipts.checkpoint_ms after the first receipt",
        ),
        Err(e) => unavailable(&e),
    }
}

async fn tile(
    State(gw): State<Arc<Gateway>>,
    Path(path): Path<String>,
    request: Request,
) -> Response {
    let admin = match admit(&gw, request).await {
        Ok(admin) => admin,
        Err(refused) => return refused,
    };
    let log = gw.log.published();
    let size = match published::checkpoint(&log).await {
        Ok(c) => c.map_or(0, |c| c.size),
        Err(e) => return unavailable(&e),
    };
    let read = match path.strip_prefix("entries/") {
        Some(rest) => match tiles::parse_index(rest) {
            Some(at) => published::entry_bundle(&log, size, at, admin).await,
            None => return not_a_tile(),
        },
        None => match tiles::parse_tile_path(&path) {
            Some(at) => published::hash_tile(&log, size, at).await,
            None => return not_a_tile(),
        },
    };
    let public = gw.config().receipts.log_access == LogAccess::Public;
    match read {
        Ok(bytes) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream")),
                (header::CACHE_CONTROL, cache(public, true)),
            ],
            bytes,
        )
            .into_response(),
        Err(Unpublished::NotFound(why)) => plain(StatusCode::NOT_FOUND, &why),
        Err(Unpublished::Forbidden(why)) => plain(StatusCode::FORBIDDEN, &why),
        Err(Unpublished::Store(e)) => unavailable(&e),
    }
}

fn not_a_tile() -> Response {
    plain(
        StatusCode::NOT_FOUND,
        "not a tile path: tile/<L>/<N>[.p/<W>] or tile/entries/<N>[.p/<W>], N in groups of three digits (x001/234)",
    )
}

fn unavailable(e: &anyhow::Error) -> Response {
    tracing::error!(target: "toolgate::log", error = %e, "cannot read the log for /log/");
    plain(StatusCode::SERVICE_UNAVAILABLE, "the log cannot be read right now; retry later")
}
