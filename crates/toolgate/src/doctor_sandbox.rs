//! `doctor`'s lines about the boxes stdio servers run in: what this host
//! can build, and each server's box.

use toolgate_gateway::gateway::Gateway;
use toolgate_mcp::sandbox::{Sandbox, host};
use toolgate_mcp::upstream::Upstream;

use crate::doctor::Report;

/// What this host can build a box from, when any server would need one.
pub(crate) fn host(gw: &Gateway, report: &mut Report) {
    let upstreams = gw.catalogs.upstreams();
    let boxed: Vec<&str> = upstreams
        .iter()
        .filter(|u| matches!(u.sandbox(), Some(Sandbox::Boxed(_))))
        .map(|u| u.name.as_str())
        .collect();
    if boxed.is_empty() {
        return;
    }
    let support = host::support();
    let layers = support.layers();
    let off: Vec<&str> =
        layers.iter().filter(|(_, on)| !on).map(|(what, _)| what.as_str()).collect();
    if !support.can_box() {
        let left: Vec<&str> =
            layers.iter().filter(|(_, on)| *on).map(|(what, _)| what.as_str()).collect();
        report.fail(
            "sandbox",
            &format!("this host cannot build a box: {}; what is left: {}", support.missing.join("; "), if left.is_empty() { "nothing".to_string() } else { left.join("; ") }),
            &format!("give the host what is missing, or write `sandbox = \"off\"` under each server to run it unboxed as toolgate's own user ({}); until then they are not started", boxed.join(", ")),
        );
    } else if off.is_empty() {
        report.ok(
            "sandbox",
            &format!(
                "this host boxes stdio servers with every layer: {}",
                layers.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>().join("; ")
            ),
        );
    } else {
        report.warn(
            "sandbox",
            &format!("this host boxes stdio servers, without: {}", off.join("; ")),
        );
    }
}

/// One server's box: what it reaches and its limits, or that it runs unboxed.
pub(crate) fn server(upstream: &Upstream, report: &Report) {
    let what = format!("sandbox {}", upstream.name);
    match upstream.sandbox() {
        None => {}
        Some(Sandbox::Off) => report.warn(&what, "sandbox = \"off\": it runs as toolgate's own user and can read toolgate's keys, secrets, config and ledger"),
        Some(Sandbox::Boxed(profile)) => {
            let network = toolgate_gateway::boxes::network_words(upstream, profile);
            let paths = |list: &[std::path::PathBuf]| if list.is_empty() { "nothing".to_string() } else { list.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ") };
            let l = profile.limits;
            report.ok(
                &what,
                &format!(
                    "reads the system paths and {}; writes {} and its own folder; {network}; at most {} MiB, {} processes, {} open files, {} CPU s; profile {}",
                    paths(&profile.read),
                    paths(&profile.write),
                    l.memory_mb,
                    l.processes,
                    l.open_files,
                    l.cpu_seconds,
                    &profile.hash[..16]
                ),
            );
        }
    }
}
