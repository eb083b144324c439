//! `GET /.well-known/oauth-protected-resource` (and the same with the
//! resource's path after it, RFC 9728 §3.1): the Protected Resource
//! Metadata an MCP client reads to find the authorization server to get a
//! token from. No token needed; 404 when `[oauth]` is not configured.
//!
//! `GET /.well-known/jwks.json`: the public keys of the gateway's identity
//! assertions (`[servers.NAME.identity] mode = "assertion"`), for the
//! servers that verify them. Always served: public keys only.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::edge::plain;
use crate::gateway::Gateway;

pub(crate) fn routes() -> axum::Router<Arc<Gateway>> {
    axum::Router::new()
        .route("/.well-known/oauth-protected-resource", axum::routing::get(metadata))
        .route("/.well-known/oauth-protected-resource/{*resource}", axum::routing::get(metadata))
        .route("/.well-known/jwks.json", axum::routing::get(jwks))
}

async fn jwks(State(gw): State<Arc<Gateway>>) -> Response {
    // Verifiers cache it; a rotation is picked up within the five minutes an assertion lives.
    (
        [(axum::http::header::CACHE_CONTROL, "public, max-age=300")],
        Json(gw.identities.jwks().clone()),
    )
        .into_response()
}

async fn metadata(State(gw): State<Arc<Gateway>>) -> Response {
    match &gw.oauth {
        Some(oauth) => (StatusCode::OK, Json(oauth.metadata())).into_response(),
        None => plain(
            StatusCode::NOT_FOUND,
            "this gateway takes no OAuth access tokens ([oauth] is not configured)",
        ),
    }
}
