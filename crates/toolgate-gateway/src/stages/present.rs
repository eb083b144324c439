//! present: the credential the call carries for its person, as its
//! server's `[servers.NAME.identity]` says (`identity/`). A credential that
//! cannot be made stops the call before anything is sent. A person with no
//! grant at an `oauth` server is given the link to connect, in the form
//! their client can act on: a URL elicitation (the 2025-11-25 error −32042,
//! or a 2026-07-28 `input_required`), else a `connect_required` refusal.

use serde_json::{Map, Value, json};
use toolgate_core::{Action, Caller, Entropy, Proposal, Reason, Refusal, Verdict};

use crate::call::{Call, Context, Stop};
use crate::config::Config;
use crate::identity::{Identities, Presented, Unmade};
use toolgate_mcp::wire::{Era, RawObject, RpcError, code};

/// The key of toolgate's own URL elicitation among a call's input requests.
pub const CONNECT_KEY: &str = "io.toolgate/connect";

pub(crate) async fn present(
    identities: &Identities,
    config: &Config,
    server: &str,
    (cx, call): (&Context, &Call),
    proposal: &Proposal,
    now_ms: impl Fn() -> i64,
    entropy: &dyn Entropy,
) -> Result<Presented, Stop> {
    let caller: &Caller = &cx.caller;
    // A person asked to connect is asked as the client's era asks.
    let ask = |connect| asked(cx.era, connect);
    identities
        .present(config, server, (caller, call.inbound_token.as_deref()), now_ms, entropy)
        .await
        .map_err(|unmade| match unmade {
            Unmade::Connect(link) => ask(connect(call, server, &link, proposal)),
            Unmade::Unavailable(why) => {
                tracing::warn!(server, %why, "no credential for the person");
                Stop::Refused(
                    Refusal::new(
                        Verdict::Allow,
                        Reason::IdentityUnavailable,
                        Action::Retry,
                        format!(
                            "the server `{server}` could not be given a credential for you \
                                ({why}); nothing was run: retry later, or ask the operator to \
                                check [servers.{server}.identity]"
                        ),
                    )
                    .with_proposal(&proposal.sha256),
                )
            }
        })
}

/// The refusal of a call whose person has not connected to `server`: the
/// link, and what to do once connected. The link is no credential: it
/// asks whoever opens it to sign in as the person.
pub fn connect_refusal(server: &str, link: &str, proposal_sha256: &str) -> Refusal {
    let message = format!(
        "the server `{server}` acts for each person with their own account, and you have not connected yours; nothing was run. \
         Open {link} in your browser, sign in as yourself, and allow access; then call again with the same arguments."
    );
    Refusal::new(Verdict::Allow, Reason::ConnectRequired, Action::Escalate, message)
        .with_proposal(proposal_sha256)
}

/// Whether the client said it can open a URL for its person: `elicitation.url`.
fn opens_urls(capabilities: Option<&Value>) -> bool {
    capabilities.and_then(|c| c.get("elicitation")).and_then(|e| e.get("url")).is_some()
}

/// How a call with no grant ends, by what its client can do: refused with
/// the link, or asked (in its era's way, `asked`) to open it.
fn connect(
    call: &Call,
    server: &str,
    link: &str,
    proposal: &Proposal,
) -> Result<(Refusal, Value), Stop> {
    let refusal = connect_refusal(server, link, &proposal.sha256);
    let declined = call
        .input
        .get("inputResponses")
        .and_then(|r| r.get(CONNECT_KEY))
        .and_then(|a| a.get("action"))
        .and_then(Value::as_str)
        .is_some_and(|a| a != "accept");
    if declined || !opens_urls(call.client_capabilities.as_ref()) {
        return Err(Stop::Refused(refusal));
    }
    let elicitation = json!({
        "mode": "url",
        "elicitationId": format!("connect-{server}-{}", &proposal.sha256[..16.min(proposal.sha256.len())]),
        "url": link,
        "message": format!("Connect your account at `{server}`: sign in as yourself and allow access, then the call runs."),
    });
    Ok((refusal, elicitation))
}

/// The question to open the link, as the client's era asks it.
fn asked(era: Era, connect: Result<(Refusal, Value), Stop>) -> Stop {
    let (refusal, elicitation) = match connect {
        Ok(asked) => asked,
        Err(stop) => return stop,
    };
    match era {
        Era::Legacy => Stop::Error(
            RpcError::new(code::URL_ELICITATION_REQUIRED, refusal.message.clone())
                .with_data(json!({"elicitations": [elicitation]})),
        ),
        Era::Modern => {
            let mut out = RawObject::new();
            let raw = |v: &Value| serde_json::value::to_raw_value(v).expect("JSON");
            out.insert("resultType".into(), raw(&json!("input_required")));
            out.insert(
                "inputRequests".into(),
                raw(&json!({CONNECT_KEY: {"method": "elicitation/create", "params": elicitation}})),
            );
            out.insert("_meta".into(), raw(&json!({REFUSAL_META: refusal})));
            Stop::Input(out)
        }
    }
}

/// The refusal an `input_required` answer of `connect` stands for (its
/// `_meta["io.toolgate/refusal"]`); `None` for any other stop.
pub(crate) fn asked_to_connect(stop: &Stop) -> Option<Refusal> {
    let Stop::Input(o) = stop else { return None };
    let meta = o.get("_meta").and_then(|m| serde_json::from_str::<Value>(m.get()).ok());
    let said = |k: &str| {
        meta.as_ref().and_then(|m| m[REFUSAL_META][k].as_str()).unwrap_or_default().to_string()
    };
    Some(
        Refusal::new(Verdict::Allow, Reason::ConnectRequired, Action::Escalate, said("message"))
            .with_proposal(&said("proposal_sha256")),
    )
}

/// Where an `input_required` answer of `connect` carries its refusal.
const REFUSAL_META: &str = "io.toolgate/refusal";

/// The input the upstream sees: without toolgate's own answer to its
/// connect question.
pub(crate) fn upstream_input(input: &Map<String, Value>) -> Map<String, Value> {
    let mut input = input.clone();
    let emptied = match input.get_mut("inputResponses").and_then(Value::as_object_mut) {
        Some(responses) => {
            responses.remove(CONNECT_KEY);
            responses.is_empty()
        }
        None => false,
    };
    if emptied {
        input.remove("inputResponses");
    }
    input
}

#[cfg(test)]
mod tests;
