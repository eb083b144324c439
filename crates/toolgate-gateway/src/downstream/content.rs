//! What a prompt or resource needs at the edge beyond the call's stages:
//! completions of their arguments, passed to their upstream under
//! authority, and a read's contents shown under the exposed URIs.

use serde_json::{Value, json};

use super::raw;
use crate::gateway::Gateway;
use toolgate_mcp::upstream::Kind;
use toolgate_mcp::wire::{RawObject, RpcError, code};

/// `completion/complete` for a prompt's or a resource template's argument,
/// passed to its upstream when the caller may see what it completes.
pub(super) async fn complete(gw: &Gateway, params: &Value) -> Result<RawObject, RpcError> {
    let reference = &params["ref"];
    let (kind, field) = match reference["type"].as_str() {
        Some("ref/prompt") => (Kind::Prompt, "name"),
        Some("ref/resource") => (Kind::Template, "uri"),
        _ => {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                "params.ref must be {type: \"ref/prompt\", name} or {type: \"ref/resource\", uri}",
            ));
        }
    };
    let name = reference[field].as_str().unwrap_or_default();
    let catalog = gw.catalogs.current();
    let found = catalog.content(kind, name).or_else(|| {
        (kind == Kind::Template).then(|| catalog.content(Kind::Resource, name)).flatten()
    });
    let Some(target) = found.filter(|t| t.listable()) else {
        let what = if kind == Kind::Prompt { "prompt" } else { "resource template" };
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("there is no {what} `{name}` to complete; list them and use one of theirs"),
        )
        .with_data(json!({field: name})));
    };
    let upstream = gw
        .catalogs
        .upstream(&target.server)
        .ok_or_else(|| RpcError::new(code::INTERNAL_ERROR, "the server is not configured"))?;
    // The upstream's own names; the client's `_meta` is its own business.
    let mut forwarded = params.clone();
    forwarded["ref"][field] = json!(target.tool.name);
    if let Some(p) = forwarded.as_object_mut() {
        p.remove("_meta");
    }
    match upstream.complete(forwarded).await {
        Ok(result) => Ok(serde_json::from_str(result.get()).unwrap_or_default()),
        Err(toolgate_mcp::upstream::UpstreamError::Rpc(e)) => Err(e),
        Err(e) => {
            tracing::warn!(server = %target.server, error = %e, "a completion failed upstream");
            Err(RpcError::new(
                code::INTERNAL_ERROR,
                format!("the server `{}` did not complete the request; retry later", target.server),
            ))
        }
    }
}

/// A resource's contents name the upstream's URIs: agents are shown the
/// exposed ones, under which they can read them again.
pub(super) fn expose_contents(gw: &Gateway, exposed: &str, result: &mut RawObject) {
    let config = gw.config();
    let Some((server, _)) = config.split_uri(exposed) else { return };
    // No prefix (`namespace = false`): the upstream's URIs are the exposed ones.
    if config.exposed_uri(server, "").is_empty() {
        return;
    }
    let Some(mut contents) =
        result.get("contents").and_then(|c| serde_json::from_str::<Vec<Value>>(c.get()).ok())
    else {
        return;
    };
    for item in &mut contents {
        if let Some(uri) = item.get("uri").and_then(Value::as_str) {
            item["uri"] = json!(config.exposed_uri(server, uri));
        }
    }
    result.insert("contents".into(), raw(&contents));
}
