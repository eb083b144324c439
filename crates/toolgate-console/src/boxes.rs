//! The console's view of the boxes stdio servers run in: the host's
//! layers above the upstreams, and each server's box in its row.

use maud::{Markup, html};
use toolgate_gateway::gateway::Gateway;
use toolgate_mcp::sandbox::{Sandbox, host};
use toolgate_mcp::upstream::Upstream;

/// Above the upstreams: what the host cannot do, when a server needs it.
pub(crate) fn host_notice(gw: &Gateway) -> Markup {
    let needs =
        gw.catalogs.upstreams().iter().any(|u| matches!(u.sandbox(), Some(Sandbox::Boxed(_))));
    let support = host::support();
    let off: Vec<String> =
        support.layers().into_iter().filter(|(_, on)| !on).map(|(what, _)| what).collect();
    html! {
        @if needs && !support.can_box() {
            p.notice.error { "This host cannot build a sandbox (" (support.missing.join("; ")) "): boxed stdio servers \
                are not started. Write sandbox = \"off\" under a server to run it unboxed, as \
                toolgate's own user." }
        } @else if needs && !off.is_empty() {
            p.notice { "Stdio servers run boxed, without: " (off.join("; ")) "." }
        }
    }
}

/// One server's box, in a word and its details.
pub(crate) fn cell(upstream: &Upstream) -> Markup {
    match upstream.sandbox() {
        None => html! { span.muted { "remote (HTTP)" } },
        Some(Sandbox::Off) => html! { span.health.down { "off" } " runs as toolgate's own user" },
        Some(Sandbox::Boxed(profile)) => {
            let paths = |list: &[std::path::PathBuf]| {
                list.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            };
            let network = toolgate_gateway::boxes::network_words(upstream, profile);
            let l = profile.limits;
            html! {
                span.health.up { "boxed" }
                dl.box {
                    dt { "reads" } dd { @if profile.read.is_empty() { "system paths" } @else { "system paths, " (paths(&profile.read)) } }
                    dt { "writes" } dd { @if profile.write.is_empty() { "its own folder" } @else { (paths(&profile.write)) ", its own folder" } }
                    dt { "network" } dd { (network) }
                    dt { "limits" } dd { (l.memory_mb) " MiB, " (l.processes) " processes, " (l.open_files) " files, " (l.cpu_seconds) " CPU s" }
                    dt { "profile" } dd { code { (profile.hash) } }
                }
            }
        }
    }
}
