//! `toolgate doctor --config F`: checks what `serve` needs, in the order it
//! needs it — the config, the policy, the signing keys, the ledger (open,
//! migrated, a write), and each upstream (reachable, era, and what a client
//! is given of its tools, prompts, resources and templates: the counts a
//! gateway serving this config lists, and why the rest are not listed) —
//! and says for each fault what to do. It starts what `serve` starts (on a
//! first run that creates the state directory, as `serve` would) and runs
//! no call. Exit status: 0 when every check passes.

use std::path::Path;
use std::time::Duration;

use toolgate_core::visible::visible;
use toolgate_gateway::catalog::{Catalog, ExposedTool};
use toolgate_gateway::config::{Config, IdentityMode};
use toolgate_gateway::gateway::{Gateway, Mode};
use toolgate_gateway::listed::{self, Listing, Why};
use toolgate_gateway::process::load_policy;
use toolgate_ledger::RunKey;
use toolgate_mcp::sandbox::{Sandbox, host};
use toolgate_mcp::upstream::{Kind, Listing as Listed, Upstream};

/// How long an upstream may take to connect and list its tools.
const UPSTREAM_WITHIN: Duration = Duration::from_secs(15);

/// The report as it is printed, and how many faults it named.
struct Report {
    faults: usize,
}

impl Report {
    // What upstreams and configs say (names, errors) reaches the terminal escaped.
    fn ok(&self, what: &str, detail: &str) {
        println!("ok    {}: {}", visible(what), visible(detail));
    }

    /// Not a fault, but less than it could be: said so, not counted.
    fn warn(&self, what: &str, detail: &str) {
        println!("warn  {}: {}", visible(what), visible(detail));
    }

    /// A line under the one before it, indented as a `fix:` is.
    fn more(&self, line: &str) {
        println!("      {}", visible(line));
    }

    fn fail(&mut self, what: &str, problem: &str, fix: &str) {
        self.faults += 1;
        println!("FAIL  {}: {}\n      fix: {}", visible(what), visible(problem), visible(fix));
    }
}

pub async fn run(path: &Path) -> anyhow::Result<()> {
    let mut report = Report { faults: 0 };
    let config = match crate::serve::load_config(path, None) {
        Ok(c) => {
            report.ok(
                "config",
                &format!(
                    "{} ({} servers, {} callers)",
                    path.display(),
                    c.servers.len(),
                    c.callers.len()
                ),
            );
            c
        }
        Err(e) => {
            report.fail(
                "config",
                &format!("{e}"),
                "correct the file; docs/CONFIG.md lists every setting",
            );
            anyhow::bail!("1 fault; nothing else can be checked without a config");
        }
    };
    if config.callers.is_empty() && config.oauth.is_none() {
        report.fail(
            "callers",
            "no [callers]: every request would be refused with 401",
            "add a caller with token_env or token_file (or one with anonymous = true)",
        );
    }
    match (&config.policy, load_policy(&config)) {
        (None, _) => report.ok("policy", "none configured: the registry decides every call"),
        (Some(_), Ok(engine)) => report.ok("policy", &format!("validates against its schema (version {})", &engine.version()[..16])),
        (Some(_), Err(e)) => report.fail("policy", &format!("{e:#}"), "`toolgate policy check --config FILE` shows Cedar's message; fix the policy or the schema"),
    }
    if let (Some(cert), Some(key)) = (&config.tls.cert_file, &config.tls.key_file) {
        match toolgate_gateway::downstream::tls::Certificate::load(cert, key) {
            Ok(_) => report.ok("tls", &format!("the listeners serve https with {}", cert.display())),
            Err(e) => report.fail("tls", &format!("{e:#}"), "give [tls] cert_file a PEM chain and key_file its key (owner-only): `serve` would not start"),
        }
    }
    // Keys that exist are checked before the start (which refuses loose
    // ones); keys a first start creates, after it.
    let had_keys =
        !matches!(toolgate_gateway::log::keys::read_history(&config.state_dir()), Ok(None));
    if had_keys {
        keys(&config, true, &mut report);
    }
    let gw = match Gateway::start(config.clone(), Mode::Inspect).await {
        Ok(gw) => gw,
        Err(e) => {
            report.fail(
                "start",
                &format!("{e:#}"),
                "the gateway cannot start: fix what the line says, then run doctor again",
            );
            anyhow::bail!("{} fault(s)", report.faults);
        }
    };
    if !had_keys {
        keys(&config, false, &mut report);
    }
    ledger(&gw, &config, &mut report).await;
    owner_only(&config, &mut report);
    sandbox_host(&gw, &mut report);
    notices(&gw, &config, &mut report).await;
    if let (Some(oauth), Some(o)) = (&gw.oauth, &config.oauth) {
        match oauth.published_keys().await {
            Ok(0) => report.fail(
                "oauth",
                &format!("{} publishes no signing key this gateway can use", o.issuer),
                "publish an RS/PS/ES/EdDSA signing key in the issuer's JWKS",
            ),
            Ok(n) => report.ok(
                "oauth",
                &format!(
                    "{} publishes {n} signing key(s); tokens must name {}",
                    o.issuer, o.resource
                ),
            ),
            Err(e) => report.fail(
                "oauth",
                &e.to_string(),
                "check [oauth] issuer (or jwks_uri) and that the authorization server answers",
            ),
        }
    }
    settle(&gw).await;
    let catalog = gw.catalogs.current();
    for upstream in gw.catalogs.upstreams() {
        let what = format!("upstream {}", upstream.name);
        match upstream.listing() {
            Some(listing) => given(&catalog, &upstream.name, &listing, path, &mut report),
            None => {
                let why = upstream.down_reason().unwrap_or_else(|| {
                    format!("not connected within {} s", UPSTREAM_WITHIN.as_secs())
                });
                let fix = if upstream
                    .sandbox()
                    .is_some_and(|s| matches!(s, toolgate_mcp::sandbox::Sandbox::Boxed(_)))
                {
                    "its last stderr lines above say why; a server in a box reaches only what [servers.NAME.sandbox] grants (read, write, network: docs/SANDBOX.md), so grant what it needs, or correct its command"
                } else {
                    "start the server, or correct its url/command in [servers]; `toolgate tools` lists what is reachable"
                };
                report.fail(&what, &why, fix);
            }
        }
        sandbox_server(&upstream, &report);
        identity(&gw, &config, &upstream.name, upstream.listing().is_some(), &report);
        connections(&gw, &config, &upstream.name, &report).await;
    }
    for (name, why) in &catalog.ambiguous {
        report.fail(
            &format!("tool {name}"),
            why,
            "rename it upstream, or set namespace = true for its server",
        );
    }
    gw.stop();
    if report.faults > 0 {
        anyhow::bail!("{} fault(s)", report.faults);
    }
    println!("all checks passed");
    Ok(())
}

/// As whom `server`'s calls run, for a server reached as each person
/// (`[servers.NAME.identity]`); `listed`: the gateway's own credential
/// worked (it read the contract with it).
fn identity(gw: &Gateway, config: &Config, server: &str, listed: bool, report: &Report) {
    let Some(s) = config.servers.get(server) else { return };
    let what = format!("identity {server}");
    let audience = toolgate_gateway::identity::audience(server, s);
    let jwks = format!(
        "keys at /.well-known/jwks.json, kid {}",
        gw.identities.jwks()["keys"][0]["kid"].as_str().unwrap_or("?")
    );
    let own = if listed { "; the gateway's own credential read its contract" } else { "" };
    match s.identity.mode {
        IdentityMode::Shared => {}
        IdentityMode::Assertion => {
            let carried = if s.url.is_some() {
                format!("in the header {}", s.identity.header())
            } else {
                "in the request's _meta".to_string()
            };
            report.ok(&what, &format!("each call carries the gateway's assertion for its person ({carried}, aud {audience}, iss {}); {jwks}{own}", config.issuer()));
        }
        IdentityMode::Exchange => {
            let endpoint = s.identity.token_endpoint.as_deref().unwrap_or_default();
            report.ok(&what, &format!("each call carries a token exchanged for its person at {} (aud {audience}); its assertions: {jwks}{own}", visible(endpoint)));
        }
        IdentityMode::Oauth => {
            let resource = s.identity.resource.as_deref().or(s.url.as_deref()).unwrap_or_default();
            report.ok(&what, &format!("each call carries its person's own token at {} (each person connects once at {}/console/connections){own}", visible(resource), config.public_url()));
        }
    }
}

/// For an `oauth` server: the gateway's own account, and the people's
/// grants that are failing (they do not open here, or ended with nothing to
/// refresh them) or end within ten minutes with nothing to refresh them.
async fn connections(gw: &Gateway, config: &Config, server: &str, report: &Report) {
    let (Some(s), Some(grants)) = (config.servers.get(server), gw.identities.connections()) else {
        return;
    };
    if s.identity.mode != IdentityMode::Oauth {
        return;
    }
    let what = format!("connections {server}");
    let rows = match gw.ledger.connections(None).await {
        Ok(rows) => rows.into_iter().filter(|c| c.server == server).collect::<Vec<_>>(),
        Err(e) => return report.warn(&what, &format!("the ledger did not answer: {e}")),
    };
    let now = gw.clock.now_ms();
    let own = toolgate_gateway::identity::gateway_caller(config);
    let (mine, people): (Vec<_>, Vec<_>) =
        rows.iter().partition(|c| c.tenant == own.tenant && c.subject == own.subject);
    if mine.is_empty() {
        report.warn(&what, &format!("the gateway has no account of its own there, so the server's tools are not listed: an admin connects one at {}/console/connections", config.public_url()));
    }
    let mut failing = Vec::new();
    for c in mine.iter().chain(people.iter()) {
        let who = if c.tenant == own.tenant && c.subject == own.subject {
            "the gateway's own".to_string()
        } else {
            format!("{} ({})", visible(&c.subject), visible(&c.tenant))
        };
        match grants.refreshable(config, c, gw.entropy.as_ref()) {
            Err(why) => failing.push(format!("{who}: {why}")),
            Ok(false) if c.expires_ms <= now => failing.push(format!(
                "{who}: its token ended and it has no refresh token (they connect again)"
            )),
            Ok(false) if c.expires_ms - now < 600_000 => failing.push(format!(
                "{who}: its token ends in {} s with no refresh token (they connect again then)",
                (c.expires_ms - now) / 1000
            )),
            Ok(_) => {}
        }
    }
    if failing.is_empty() {
        report.ok(
            &what,
            &format!(
                "{} {} connected; none failing or about to end",
                people.len(),
                if people.len() == 1 { "person" } else { "people" }
            ),
        );
    } else {
        report.warn(&what, &format!("{} of {} failing or about to end", failing.len(), rows.len()));
        for f in failing {
            report.more(&f);
        }
    }
}

/// The four lists a client reads, in the order doctor counts them.
const KINDS: [(Kind, &str, &str); 4] = [
    (Kind::Tool, "tool", "tools"),
    (Kind::Prompt, "prompt", "prompts"),
    (Kind::Resource, "resource", "resources"),
    (Kind::Template, "template", "templates"),
];

/// `N tools, M prompts` for the counts given (none: `-`), each noun in its number.
fn counted(counts: &[usize; 4]) -> String {
    let parts: Vec<String> = KINDS
        .iter()
        .zip(counts)
        .filter(|(_, n)| **n > 0)
        .map(|((_, one, many), n)| format!("{n} {}", if *n == 1 { one } else { many }))
        .collect();
    if parts.is_empty() { "-".into() } else { parts.join(", ") }
}

/// One reachable upstream: what a client of a gateway serving this config
/// is given of what it offers — the counts its `tools/list`, `prompts/list`,
/// `resources/list` and `resources/templates/list` return — and, for what
/// is not listed, why and what would list it (`toolgate_gateway::listed`).
fn given(
    catalog: &Catalog,
    server: &str,
    listing: &Listed,
    config_path: &Path,
    report: &mut Report,
) {
    let what = format!("upstream {server}");
    let items: Vec<&ExposedTool> =
        catalog.all().filter(|t| t.server == server).map(|t| t.as_ref()).collect();
    let mut shown = Vec::new();
    let mut once_served = 0;
    // Why not, by reason: how many of each kind, and the items.
    let mut hidden: std::collections::BTreeMap<&'static str, (Why, [usize; 4], Vec<&ExposedTool>)> =
        Default::default();
    for (i, (kind, _, many)) in KINDS.iter().enumerate() {
        let offered = listing.of(*kind).len();
        let of_kind: Vec<&ExposedTool> =
            items.iter().copied().filter(|t| t.kind == *kind).collect();
        let mut given = 0;
        for t in of_kind.iter().copied() {
            match listed::listing(t, Mode::Inspect) {
                Listing::Listed => given += 1,
                Listing::OnceServed => {
                    given += 1;
                    once_served += 1;
                }
                Listing::NotListed(why) => {
                    let entry =
                        hidden.entry(why.code()).or_insert_with(|| (why, [0; 4], Vec::new()));
                    entry.1[i] += 1;
                    entry.2.push(t);
                }
            }
        }
        // What the server lists that the catalog does not hold: a name that
        // is not unambiguous, or a template that does not parse.
        let dropped = offered.saturating_sub(of_kind.len());
        if dropped > 0 {
            hidden
                .entry(Why::Ambiguous.code())
                .or_insert_with(|| (Why::Ambiguous, [0; 4], Vec::new()))
                .1[i] += dropped;
        }
        shown.push(format!("{given} of {offered} {many}"));
    }
    let pinned = if once_served > 0 {
        format!(
            "; {once_served} not pinned yet, listed once served (a serving gateway pins what it first sees)"
        )
    } else {
        String::new()
    };
    let detail = format!(
        "protocol {} ({:?}); a client is given {}{pinned}",
        listing.protocol_version,
        listing.era,
        shown.join(", ")
    );
    // Hidden by the registry's silence is a surprise worth a line; hidden
    // by its word is what the operator chose.
    if hidden.values().any(|(why, _, _)| why.registry_would_list()) {
        report.warn(&what, &detail);
    } else {
        report.ok(&what, &detail);
    }
    let config = config_path.display();
    // The notes under that line first, then the faults, each with its fix.
    let (faults, notes): (Vec<_>, Vec<_>) =
        hidden.values().partition(|(why, _, _)| *why == Why::ContractChanged);
    for (why, counts, items) in notes.into_iter().chain(faults) {
        match why {
            Why::UntrustedUnregistered | Why::AnnotationsImplyProhibited => {
                report.more(&format!("not listed: {}: {}. `toolgate audit --config {config} --suggest` prints an entry for each; the first:", counted(counts), why.short()));
                if let Some(fix) = items.first().and_then(|t| listed::to_list(t, Mode::Inspect)) {
                    for line in fix.toml.lines() {
                        report.more(&format!("  {line}"));
                    }
                }
            }
            Why::Prohibited => report.more(&format!(
                "not listed: {}: the registry classes them prohibited",
                counted(counts)
            )),
            Why::ContractChanged => {
                let names: Vec<String> = items.iter().map(|t| t.pin_name().into_owned()).collect();
                report.fail(
                    &what,
                    &format!("not listed, and refused, until accepted: {}: contract changed since pinned ({})", counted(counts), names.join(", ")),
                    &format!("review each change and accept it: `toolgate tools --config {config} --accept {}`", names.first().map_or("NAME", String::as_str)),
                );
            }
            Why::NotPinned | Why::Ambiguous => {
                report.more(&format!("not listed: {}: {}", counted(counts), why.short()))
            }
        }
    }
}

/// Waits until every upstream has listed its tools or failed a first time
/// (a refused connection need not be waited out), at most `UPSTREAM_WITHIN`.
async fn settle(gw: &Gateway) {
    let deadline = tokio::time::Instant::now() + UPSTREAM_WITHIN;
    while tokio::time::Instant::now() < deadline
        && gw
            .catalogs
            .upstreams()
            .iter()
            .any(|u| u.listing().is_none() && u.down_reason().is_none())
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The receipt keys: their kid, and that nobody else can read them.
fn keys(config: &Config, had_keys: bool, report: &mut Report) {
    let state = config.state_dir();
    match toolgate_gateway::log::keys::read_history(&state) {
        Ok(Some(history)) => {
            let dir = state.join("keys");
            let loose: Vec<String> = std::fs::read_dir(&dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .filter(|e| mode(&e.path()) & 0o077 != 0)
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            if loose.is_empty() {
                let created = if had_keys { "" } else { "; created by this first start" };
                report.ok(
                    "keys",
                    &format!(
                        "receipt key {} ({} retired), owner-only{created}",
                        history.current.kid,
                        history.retired.len()
                    ),
                );
            } else {
                report.fail(
                    "keys",
                    &format!("readable by others: {}", loose.join(", ")),
                    &format!("chmod 600 {}/*", dir.display()),
                );
            }
        }
        Ok(None) => report.fail(
            "keys",
            &format!("no key history in {} after the start", state.join("keys").display()),
            "check the state directory is writable by this user",
        ),
        Err(e) => report.fail(
            "keys",
            &format!("{e:#}"),
            "restore keys.json from a backup; a broken history cannot sign",
        ),
    }
}

/// The state directory and what toolgate wrote in it (the ledger, its
/// journal, the request-state key, the keys, the archive) are owner-only.
/// A box's own folder is its server's to fill, so only the folder itself
/// is checked.
fn owner_only(config: &Config, report: &mut Report) {
    let state = config.state_dir();
    let mut loose = Vec::new();
    let mut walk = vec![state.clone()];
    while let Some(dir) = walk.pop() {
        if mode(&dir) & 0o077 != 0 {
            loose.push(dir.display().to_string());
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let in_boxes = path.parent().is_some_and(|p| p == state.join("boxes"));
            if is_dir && !in_boxes {
                walk.push(path);
            } else if mode(&path) & 0o077 != 0 {
                loose.push(path.display().to_string());
            }
        }
    }
    if loose.is_empty() {
        report.ok(
            "state",
            &format!("{} and everything toolgate wrote in it are owner-only", state.display()),
        );
    } else {
        loose.truncate(10);
        report.fail(
            "state",
            &format!("readable by others: {}", loose.join(", ")),
            &format!("chmod -R go-rwx {}", state.display()),
        );
    }
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0)
}

/// What this host can build a box from, when any server would need one.
fn sandbox_host(gw: &Gateway, report: &mut Report) {
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
fn sandbox_server(upstream: &Upstream, report: &Report) {
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

/// The outbox of approval notices: a dead notice (its webhook's attempts
/// ran out) is a fault — nobody was told of that approval.
async fn notices(gw: &Gateway, config: &Config, report: &mut Report) {
    use toolgate_ledger::NoticeState;
    let (dead, pending) = match (
        gw.ledger.notices(None, Some(NoticeState::Dead), 5).await,
        gw.ledger.count_notices(NoticeState::Pending).await,
    ) {
        (Ok(dead), Ok(pending)) => (dead, pending),
        (Err(e), _) | (_, Err(e)) => {
            return report.fail("notices", &e.to_string(), "check the database is up");
        }
    };
    let hooks = config.approvals.notify.webhooks.len();
    if dead.is_empty() {
        return report
            .ok("notices", &format!("{hooks} webhook(s); none dead, {pending} being tried"));
    }
    let count = gw.ledger.count_notices(NoticeState::Dead).await.unwrap_or(dead.len() as u64);
    let newest: Vec<String> = dead
        .iter()
        .map(|n| {
            format!(
                "{} (approval {}, webhook {}, {})",
                n.id,
                n.approval_id,
                n.webhook,
                n.last_status.map_or_else(
                    || n.last_error.clone().unwrap_or_default(),
                    |s| format!("HTTP {s}")
                )
            )
        })
        .collect();
    report.fail(
        "notices",
        &format!("{count} dead: their webhook's attempts ran out, so nobody was told of those approvals; newest: {}", newest.join("; ")),
        "fix the receiver, then send them again from the console's Notices page (an admin); `toolgate approvals list` shows the approvals meanwhile",
    );
}

/// The ledger: open and migrated (the start did both), and it takes a write
/// — a run of the doctor's own, counted zero times, that expires at once.
async fn ledger(gw: &Gateway, config: &Config, report: &mut Report) {
    let key = RunKey {
        tenant: "toolgate-doctor".into(),
        subject: "toolgate-doctor".into(),
        run: "doctor".into(),
    };
    let now = gw.clock.now_ms();
    let wrote =
        tokio::time::timeout(Duration::from_secs(5), gw.ledger.run(&key, false, now, 1)).await;
    let size = gw.ledger.log_size().await;
    match (wrote, size) {
        (Ok(Ok(_)), Ok(size)) => report.ok(
            "ledger",
            &format!(
                "{} open, migrated, writable; the log holds {size} receipts",
                config.ledger_display()
            ),
        ),
        (Ok(Err(e)), _) | (_, Err(e)) => report.fail(
            "ledger",
            &format!("{}: {e}", config.ledger_display()),
            "check the database is up and the file or role may write",
        ),
        (Err(_), _) => report.fail(
            "ledger",
            &format!("{}: no answer within 5 s", config.ledger_display()),
            "check the database is up and reachable",
        ),
    }
}
