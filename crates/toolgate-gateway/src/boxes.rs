//! What the gateway says about its servers' boxes: at start, and to
//! `doctor`, `audit` and the console, in the same words.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use toolgate_mcp::sandbox::{Network, Sandbox, host};
use toolgate_mcp::upstream::Upstream;

/// At start: what this host can build, and each stdio server's box. A host
/// that cannot box is a WARN that names what is missing; each server then
/// stays down until its config says `sandbox = "off"`.
pub fn say_at_start(upstreams: &[Arc<Upstream>]) {
    let stdio: Vec<_> = upstreams.iter().filter_map(|u| u.sandbox().map(|s| (u, s))).collect();
    if stdio.is_empty() {
        return;
    }
    let support = host::support();
    if !support.can_box() {
        let boxed: Vec<&str> = stdio
            .iter()
            .filter(|(_, s)| matches!(s, Sandbox::Boxed(_)))
            .map(|(u, _)| u.name.as_str())
            .collect();
        tracing::warn!(missing = %support.missing.join("; "), servers = ?boxed, "this host cannot build \
            a sandbox: these stdio servers are not started; write `sandbox = \"off\"` under a \
            server to run it unboxed, as toolgate's own user");
    }
    for (upstream, sandbox) in stdio {
        match sandbox {
            Sandbox::Off => {
                tracing::warn!(server = %upstream.name, "sandbox = \"off\": this stdio server runs \
                    unboxed, as toolgate's own user; it can read toolgate's keys, secrets and \
                    ledger")
            }
            Sandbox::Boxed(profile) => {
                tracing::info!(server = %upstream.name, profile = %profile.hash, network = %describe(sandbox)["network"], "stdio server boxed")
            }
        }
    }
}

/// A box's network in words, with what the proxy allowed and refused so
/// far: the same for `doctor` and the console.
pub fn network_words(upstream: &Upstream, profile: &toolgate_mcp::sandbox::Profile) -> String {
    match &profile.network {
        Network::None => "no network".to_string(),
        Network::All => "the host's whole network".to_string(),
        Network::Allow(list) => {
            let counts = upstream.network_counts();
            let (allowed, refused) =
                (counts.allowed.load(Ordering::Relaxed), counts.refused.load(Ordering::Relaxed));
            let hosts = list.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
            format!(
                "only {hosts} through toolgate's proxy ({allowed} connections allowed, {refused} refused so far)"
            )
        }
    }
}

/// One server's box as JSON: `null` for an HTTP upstream; `{"sandbox":
/// "off"}`; or the profile with its hash and home, and the proxy's counts.
pub fn describe_upstream(upstream: &Upstream) -> Value {
    let Some(sandbox) = upstream.sandbox() else { return Value::Null };
    let mut out = describe(sandbox);
    if let Sandbox::Boxed(profile) = sandbox
        && matches!(profile.network, Network::Allow(_))
    {
        let counts = upstream.network_counts();
        out["connections"] = json!({"allowed": counts.allowed.load(Ordering::Relaxed), "refused": counts.refused.load(Ordering::Relaxed)});
    }
    out
}

/// A box as JSON.
pub fn describe(sandbox: &Sandbox) -> Value {
    match sandbox {
        Sandbox::Off => json!({"sandbox": "off"}),
        Sandbox::Boxed(profile) => {
            let mut out = profile.description();
            out["hash"] = json!(profile.hash);
            out["home"] = json!(profile.home.display().to_string());
            out
        }
    }
}

/// The host's layers as JSON, for doctor and the console.
pub fn host_layers() -> Value {
    let support = host::support();
    json!({
        "can_box": support.can_box(),
        "missing": support.missing,
        "layers": support.layers().into_iter().map(|(what, on)| json!({"layer": what, "in_force": on})).collect::<Vec<_>>(),
    })
}
