//! Who asked (issue 61, upstream identity): the demo's tickets server runs
//! a call only with toolgate's signed assertion of who is asking
//! (`[servers.tickets.identity] mode = "assertion"`), so the note a call
//! writes names the technician the agent works for, not a service account;
//! the same call made straight to the server, without toolgate, is refused.

use std::net::SocketAddr;
use std::path::Path;

use serde_json::json;

use super::client::{Client, call, call_with_meta, count_lines, stdio_client_with, who_asked};
use super::flow::Steps;

/// The person the demo's agent works for: the agent caller's subject,
/// which toolgate asserts as `sub` (the agent's own name is `act.sub`).
pub const TECHNICIAN: &str = "sam@atlas.example";
/// The tickets server's audience in toolgate's config and on its command line.
pub const AUDIENCE: &str = "tickets";

const UPDATE: &str = "tickets__post_ticket_update";

/// The gateway's issuer: the demo sets no `[identity] issuer` and no
/// `receipts.origin`, so it is the default origin.
fn issuer() -> String {
    toolgate_gateway::config::ReceiptsConfig::default().origin
}

/// The tickets server's options that make it verify toolgate's assertion,
/// against the keys published by the gateway listening on `gateway`.
pub fn tickets_args(gateway: SocketAddr) -> Vec<String> {
    let jwks = format!("http://{gateway}/.well-known/jwks.json");
    ["--identity-jwks", &jwks, "--identity-issuer", &issuer(), "--identity-audience", AUDIENCE]
        .map(String::from)
        .to_vec()
}

pub async fn run(
    via: &Client,
    exe: &Path,
    sandbox: &Path,
    gateway: SocketAddr,
) -> anyhow::Result<bool> {
    println!(
        "\n11. Who asked: the tickets server acts on toolgate's signed word, and each note names the technician\n"
    );
    let mut s = Steps(true);
    let notes = || count_lines(&sandbox.join(toolgate_atlas::sandbox::NOTES));
    let ticket = super::flow::order(1)?["ticket_id"].as_str().unwrap_or_default().to_string();
    let update = json!({"ticket_id": ticket, "note": "Fitted the -S thermostatic valve; the unit holds temperature under load."});
    // A run of its own: nothing private was read in it, so the update is not held.
    let run = json!({"io.toolgate/run": "demo-who-asked"});

    let before = notes();
    let ran = call_with_meta(via, UPDATE, &update, run.clone()).await;
    let named = ran.structured().is_some_and(|v| {
        v["requested_by"] == TECHNICIAN && v["agent"] == "agent" && v["tenant"] == "atlas"
    });
    s.step(
        "a note through toolgate: the server verifies toolgate's assertion",
        ran.summary(),
        named && notes() == before + 1,
    );

    let read = call_with_meta(via, "tickets__get_ticket", &json!({"ticket_id": ticket}), run).await;
    let last = read
        .structured()
        .and_then(|t| t["appended_notes"].as_array()?.last().cloned())
        .unwrap_or_default();
    s.step(
        "the ticket, read back: the note names the technician, not a service account",
        format!(
            "ticket {ticket}: note {} {}",
            last["note_id"].as_str().unwrap_or("?"),
            who_asked(&last)
        ),
        last["requested_by"] == TECHNICIAN,
    );

    // As a caller that goes around toolgate would: the server takes nobody's word but toolgate's.
    let direct = stdio_client_with(exe, "tickets", sandbox, &tickets_args(gateway)).await?;
    let before = notes();
    let around = call(&direct, "post_ticket_update", &update).await;
    let said = match &around {
        super::client::Got::Result(r) if around.is_error() => {
            let text = r["content"][0]["text"].as_str().unwrap_or("");
            format!("refused by the server: {}", text.split(';').next().unwrap_or(text))
        }
        other => other.summary(),
    };
    s.step(
        "the same note straight to the tickets server, without toolgate",
        format!("{said}; notes written: {}", notes() - before),
        around.is_error() && notes() == before,
    );
    let _ = direct.cancel().await;
    Ok(s.0)
}

#[cfg(test)]
mod tests {
    use toolgate_gateway::config::{Config, IdentityMode};

    use super::*;

    /// The config the demo writes asks toolgate for assertions to tickets,
    /// and tells the tickets server the issuer and audience toolgate uses.
    #[test]
    fn the_demo_config_and_the_tickets_command_line_agree() {
        let dir = tempfile::tempdir().unwrap();
        let gateway: SocketAddr = "127.0.0.1:4242".parse().unwrap();
        let (path, _) = super::super::write_config(
            dir.path(),
            Path::new("/usr/bin/toolgate"),
            "http://127.0.0.1:1/mcp",
            "http://127.0.0.1:2/mcp",
            "http://127.0.0.1:3/mcp",
            gateway,
        )
        .unwrap();
        let config = Config::load(&path).unwrap();
        let tickets = &config.servers["tickets"];
        assert_eq!(tickets.identity.mode, IdentityMode::Assertion);
        assert_eq!(tickets.identity.audience.as_deref(), Some(AUDIENCE));
        let after = |flag: &str| {
            tickets.args.iter().position(|a| a == flag).map(|i| tickets.args[i + 1].clone())
        };
        assert_eq!(after("--identity-issuer").as_deref(), Some(config.issuer()));
        assert_eq!(after("--identity-audience").as_deref(), Some(AUDIENCE));
        assert_eq!(
            after("--identity-jwks").as_deref(),
            Some("http://127.0.0.1:4242/.well-known/jwks.json")
        );
        assert_eq!(config.callers["agent"].subject.as_deref(), Some(TECHNICIAN));
    }
}
