//! `toolgate doctor --config F`: checks what `serve` needs, in the order it
//! needs it — the config, the policy, the signing keys, the ledger (open,
//! migrated, a write), and each upstream (reachable, era, tools, pins) —
//! and says for each fault what to do. It starts what `serve` starts (on a
//! first run that creates the state directory, as `serve` would) and runs
//! no call. Exit status: 0 when every check passes.

use std::path::Path;
use std::time::Duration;

use toolgate_core::visible::visible;
use toolgate_gateway::config::Config;
use toolgate_gateway::gateway::{Gateway, Mode, load_policy};
use toolgate_gateway::pins::PinStatus;
use toolgate_ledger::RunKey;

/// How long an upstream may take to connect and list its tools.
const UPSTREAM_WITHIN: Duration = Duration::from_secs(15);

/// The report as it is printed, and how many faults it named.
pub(crate) struct Report {
    faults: usize,
}

impl Report {
    // What upstreams and configs say (names, errors) reaches the terminal escaped.
    pub(crate) fn ok(&self, what: &str, detail: &str) {
        println!("ok    {}: {}", visible(what), visible(detail));
    }

    /// Not a fault, but less than it could be: said so, not counted.
    pub(crate) fn warn(&self, what: &str, detail: &str) {
        println!("warn  {}: {}", visible(what), visible(detail));
    }

    pub(crate) fn fail(&mut self, what: &str, problem: &str, fix: &str) {
        self.faults += 1;
        println!("FAIL  {}: {}\n      fix: {}", visible(what), visible(problem), visible(fix));
    }
}

pub async fn run(path: &Path) -> anyhow::Result<()> {
    let mut report = Report { faults: 0 };
    let config = match Config::load(path) {
        Ok(c) => {
            report.ok("config", &format!("{} ({} servers, {} callers)", path.display(), c.servers.len(), c.callers.len()));
            c
        }
        Err(e) => {
            report.fail("config", &format!("{e:#}"), "correct the file; docs/CONFIG.md lists every setting");
            anyhow::bail!("1 fault; nothing else can be checked without a config");
        }
    };
    if config.callers.is_empty() && config.oauth.is_none() {
        report.fail("callers", "no [callers]: every request would be refused with 401", "add a caller with token_env or token_file (or one with anonymous = true)");
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
    let had_keys = !matches!(toolgate_gateway::keys::read_history(&config.state_dir()), Ok(None));
    if had_keys {
        keys(&config, true, &mut report);
    }
    let gw = match Gateway::start(config.clone(), Mode::Inspect).await {
        Ok(gw) => gw,
        Err(e) => {
            report.fail("start", &format!("{e:#}"), "the gateway cannot start: fix what the line says, then run doctor again");
            anyhow::bail!("{} fault(s)", report.faults);
        }
    };
    if !had_keys {
        keys(&config, false, &mut report);
    }
    ledger(&gw, &config, &mut report).await;
    owner_only(&config, &mut report);
    crate::doctor_sandbox::host(&gw, &mut report);
    notices(&gw, &config, &mut report).await;
    if let (Some(oauth), Some(o)) = (&gw.oauth, &config.oauth) {
        match oauth.published_keys().await {
            Ok(0) => report.fail("oauth", &format!("{} publishes no signing key this gateway can use", o.issuer), "publish an RS/PS/ES/EdDSA signing key in the issuer's JWKS"),
            Ok(n) => report.ok("oauth", &format!("{} publishes {n} signing key(s); tokens must name {}", o.issuer, o.resource)),
            Err(e) => report.fail("oauth", &e.to_string(), "check [oauth] issuer (or jwks_uri) and that the authorization server answers"),
        }
    }
    settle(&gw).await;
    let catalog = gw.catalogs.current();
    for upstream in gw.catalogs.upstreams() {
        let what = format!("upstream {}", upstream.name);
        match upstream.listing() {
            Some(listing) => {
                let tools: Vec<_> = catalog.tools.values().filter(|t| t.server == upstream.name).collect();
                let changed = tools.iter().filter(|t| matches!(t.pin, PinStatus::Changed(_))).count();
                let new = tools.iter().filter(|t| matches!(t.pin, PinStatus::New)).count();
                let content = format!("{} prompts, {} resources, {} templates", listing.prompts.len(), listing.resources.len(), listing.templates.len());
                report.ok(&what, &format!("protocol {} ({:?}), {} tools listed, {} exposed, {new} not pinned yet; {content}", listing.protocol_version, listing.era, listing.tools.len(), tools.len()));
                if changed > 0 {
                    report.fail(&what, &format!("{changed} tool contract(s) changed since pinned: those tools are refused"), "`toolgate tools --config FILE` shows them; review and `--accept NAME`");
                }
            }
            None => {
                let why = upstream.down_reason().unwrap_or_else(|| format!("not connected within {} s", UPSTREAM_WITHIN.as_secs()));
                let fix = if upstream.sandbox().is_some_and(|s| matches!(s, toolgate_gateway::sandbox::Sandbox::Boxed(_))) {
                    "its last stderr lines above say why; a server in a box reaches only what [servers.NAME.sandbox] grants (read, write, network: docs/SANDBOX.md), so grant what it needs, or correct its command"
                } else {
                    "start the server, or correct its url/command in [servers]; `toolgate tools` lists what is reachable"
                };
                report.fail(&what, &why, fix);
            }
        }
        crate::doctor_sandbox::server(upstream, &report);
    }
    for (name, why) in &catalog.ambiguous {
        report.fail(&format!("tool {name}"), why, "rename it upstream, or set namespace = true for its server");
    }
    gw.stop();
    if report.faults > 0 {
        anyhow::bail!("{} fault(s)", report.faults);
    }
    println!("all checks passed");
    Ok(())
}

/// Waits until every upstream has listed its tools or failed a first time
/// (a refused connection need not be waited out), at most `UPSTREAM_WITHIN`.
async fn settle(gw: &Gateway) {
    let deadline = tokio::time::Instant::now() + UPSTREAM_WITHIN;
    while tokio::time::Instant::now() < deadline && gw.catalogs.upstreams().iter().any(|u| u.listing().is_none() && u.down_reason().is_none()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The receipt keys: their kid, and that nobody else can read them.
fn keys(config: &Config, had_keys: bool, report: &mut Report) {
    let state = config.state_dir();
    match toolgate_gateway::keys::read_history(&state) {
        Ok(Some(history)) => {
            let dir = state.join("keys");
            let loose: Vec<String> = std::fs::read_dir(&dir)
                .map(|entries| entries.flatten().filter(|e| mode(&e.path()) & 0o077 != 0).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            if loose.is_empty() {
                let created = if had_keys { "" } else { "; created by this first start" };
                report.ok("keys", &format!("receipt key {} ({} retired), owner-only{created}", history.current.kid, history.retired.len()));
            } else {
                report.fail("keys", &format!("readable by others: {}", loose.join(", ")), &format!("chmod 600 {}/*", dir.display()));
            }
        }
        Ok(None) => report.fail("keys", &format!("no key history in {} after the start", state.join("keys").display()), "check the state directory is writable by this user"),
        Err(e) => report.fail("keys", &format!("{e:#}"), "restore keys.json from a backup; a broken history cannot sign"),
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
        report.ok("state", &format!("{} and everything toolgate wrote in it are owner-only", state.display()));
    } else {
        loose.truncate(10);
        report.fail("state", &format!("readable by others: {}", loose.join(", ")), &format!("chmod -R go-rwx {}", state.display()));
    }
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0)
}

/// The outbox of approval notices: a dead notice (its webhook's attempts
/// ran out) is a fault — nobody was told of that approval.
async fn notices(gw: &Gateway, config: &Config, report: &mut Report) {
    use toolgate_ledger::NoticeState;
    let (dead, pending) = match (gw.ledger.notices(None, Some(NoticeState::Dead), 5).await, gw.ledger.count_notices(NoticeState::Pending).await) {
        (Ok(dead), Ok(pending)) => (dead, pending),
        (Err(e), _) | (_, Err(e)) => return report.fail("notices", &e.to_string(), "check the database is up"),
    };
    let hooks = config.approvals.notify.webhooks.len();
    if dead.is_empty() {
        return report.ok("notices", &format!("{hooks} webhook(s); none dead, {pending} being tried"));
    }
    let count = gw.ledger.count_notices(NoticeState::Dead).await.unwrap_or(dead.len() as u64);
    let newest: Vec<String> = dead.iter().map(|n| format!("{} (approval {}, webhook {}, {})", n.id, n.approval_id, n.webhook, n.last_status.map_or_else(|| n.last_error.clone().unwrap_or_default(), |s| format!("HTTP {s}")))).collect();
    report.fail(
        "notices",
        &format!("{count} dead: their webhook's attempts ran out, so nobody was told of those approvals; newest: {}", newest.join("; ")),
        "fix the receiver, then send them again from the console's Notices page (an admin); `toolgate approvals list` shows the approvals meanwhile",
    );
}

/// The ledger: open and migrated (the start did both), and it takes a write
/// — a run of the doctor's own, counted zero times, that expires at once.
async fn ledger(gw: &Gateway, config: &Config, report: &mut Report) {
    let key = RunKey { tenant: "toolgate-doctor".into(), subject: "toolgate-doctor".into(), run: "doctor".into() };
    let now = gw.clock.now_ms();
    let wrote = tokio::time::timeout(Duration::from_secs(5), gw.ledger.run(&key, false, now, 1)).await;
    let size = gw.ledger.log_size().await;
    match (wrote, size) {
        (Ok(Ok(_)), Ok(size)) => report.ok("ledger", &format!("{} open, migrated, writable; the log holds {size} receipts", config.ledger_display())),
        (Ok(Err(e)), _) | (_, Err(e)) => report.fail("ledger", &format!("{}: {e}", config.ledger_display()), "check the database is up and the file or role may write"),
        (Err(_), _) => report.fail("ledger", &format!("{}: no answer within 5 s", config.ledger_display()), "check the database is up and reachable"),
    }
}
