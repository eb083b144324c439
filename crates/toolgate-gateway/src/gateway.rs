//! The running gateway: configuration, callers, policy, supervised
//! upstreams, the catalog and pins, the approvals store and the requestState
//! key — everything a call needs, shared by both downstream edges.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolgate_core::strict_json::JsonLimits;

use toolgate_core::policy::PolicyEngine;
use toolgate_core::{Clock, Entropy};

pub use crate::sources::Sources;
use toolgate_ledger::Ledger;

use crate::callers::Callers;
use crate::catalog::{Catalogs, Live};
use crate::config::Config;
use crate::pins::PinStore;
use crate::process;
use crate::seal::Sealer;

/// Everything a call needs, built once at start and shared by both edges.
pub struct Gateway {
    /// The config and policy in force and their upstreams (`live()`), and
    /// the upstreams' tools as exposed now, with their pins.
    pub catalogs: Catalogs,
    /// Size and depth limits of every JSON message read.
    pub limits: JsonLimits,
    /// Who may call, by credential.
    pub callers: Callers,
    /// OAuth 2.1 access tokens of one authorization server (`[oauth]`).
    pub oauth: Option<crate::oauth::OAuth>,
    /// One reload at a time (SIGHUP, the console).
    pub(crate) reloading: tokio::sync::Mutex<()>,
    /// Approvals, operations and the receipt log (SQLite or PostgreSQL).
    pub ledger: Arc<dyn Ledger>,
    /// Signing keys and checkpoints of the receipt log.
    pub log: Arc<crate::log::receipt_log::ReceiptLog>,
    /// Seals and opens the `requestState` handed to clients.
    pub(crate) sealer: Sealer,
    /// The one clock every stage reads.
    pub clock: Arc<dyn Clock>,
    /// Salts, identifiers and nonces.
    pub entropy: Arc<dyn Entropy>,
    /// Redacts captured tool content (`telemetry.capture_content`).
    pub(crate) redactor: crate::telemetry::Redactor,
    /// Calls held for their approval's decision, and what wakes them.
    pub holds: Arc<crate::holds::Holds>,
    /// The calls in flight a client may cancel (`notifications/cancelled`).
    pub(crate) cancels: crate::cancels::Cancels,
    /// The legacy HTTP sessions this replica issued (their streams and subscriptions).
    pub(crate) sessions: crate::sessions::Sessions,
    /// Turns per caller for opening approvals (`[approvals] max_pending_per_caller`).
    pub(crate) openings: crate::stages::approve::Openings,
    /// Tells approvers that an approval waits (`[approvals.notify]`).
    pub(crate) notifier: crate::notify::Notifier,
    /// The guards of the decide stage (`[guards]`).
    pub guards: crate::stages::decide::Guards,
    /// Agent runs: their legs of the trifecta and call counts, in the ledger.
    pub runs: crate::runs::Runs,
    /// Rates per caller and calls at once per tool, in memory, at this
    /// replica's share of the fleet's.
    pub budgets: Arc<crate::budgets::Budgets>,
    /// Every credential the gateway holds, which no upstream's answer and
    /// no log line may carry (`withheld.rs`).
    pub held: Arc<toolgate_core::credentials::Credentials>,
    /// The credentials a call carries for its person (`[servers.NAME.identity]`)
    /// and the keys that verify the gateway's assertions.
    pub identities: Arc<crate::identity::Identities>,
    /// People's own processes of stdio servers reached with their token
    /// (`identity.env`).
    pub personal: Arc<crate::personal::Personal>,
    pub(crate) cancel: CancellationToken,
    /// Cancelled when shutdown begins: long-lived streams end so the server
    /// can drain. Also cancelled by `stop`.
    draining: CancellationToken,
}

/// Whether this process serves calls (and so pins tools on first sight) or
/// only inspects them (`toolgate tools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `toolgate serve` and the demo: calls run, new tools are pinned.
    Serve,
    /// The CLI looking at the tools: nothing runs, nothing is pinned.
    Inspect,
}

impl Gateway {
    /// Opens the ledger and the pin lock file and starts one supervisor per
    /// upstream.
    pub async fn start(config: Config, mode: Mode) -> anyhow::Result<Arc<Self>> {
        Self::start_with(config, mode, Sources::system()).await
    }

    /// `start`, with the given clock and randomness.
    pub async fn start_with(
        config: Config,
        mode: Mode,
        sources: Sources,
    ) -> anyhow::Result<Arc<Self>> {
        let Sources { clock, entropy } = sources;
        // Everything that can refuse the start comes before any upstream starts.
        let policy = process::load_policy(&config)?;
        let callers = match mode {
            Mode::Serve => Callers::load(&config)?,
            Mode::Inspect => Callers::none(),
        };
        // The gateway that serves calls sequences a read's receipts rather
        // than commit each (see `toolgate_ledger::open_sequencing`).
        let ledger = process::open_ledger_as(&config, mode == Mode::Serve).await?;
        let state = config.state_dir();
        let sealer = Sealer::load_or_create(&state.join("requeststate.key"), entropy.clone())?;
        let keys = crate::log::keys::LogKeys::load_or_create(
            &state,
            &config.receipts.origin,
            clock.as_ref(),
            entropy.as_ref(),
        )?;
        let identities = crate::identity::Identities::new(
            keys.identity.clone(),
            &keys.retired_identities(),
            config.tls.roots(),
        )?;
        let identities = Arc::new(identities.with_connections(
            ledger.clone(),
            config.tls.roots(),
            crate::fleet::replica_id(),
        )?);
        let log = crate::log::receipt_log::ReceiptLog::open(
            keys,
            config.receipts.clone(),
            crate::log::archive::Archive::in_state_dir(&state),
            ledger.clone(),
            clock.clone(),
            entropy.clone(),
        )
        .await?;
        let pins = Arc::new(PinStore::open(&config.lock_path(), clock.clone())?);
        let cancel = CancellationToken::new();
        let sources = (&identities, &clock, &entropy);
        let upstreams: Vec<_> = config
            .servers
            .keys()
            .map(|name| process::start_upstream(&config, name, &cancel, sources))
            .collect();
        crate::boxes::say_at_start(&upstreams.iter().map(|(u, _)| u.clone()).collect::<Vec<_>>());
        let settings = &config.gateway;
        let limits = JsonLimits {
            max_bytes: settings.max_body_bytes,
            max_depth: settings.max_depth,
            max_string_bytes: settings.max_string_bytes,
            max_items: settings.max_items,
        };
        let config = Arc::new(config);
        let catalogs = Catalogs::new(
            Live::new(config.clone(), Arc::new(policy), upstreams),
            pins,
            mode == Mode::Serve,
        );
        let draining = cancel.child_token();
        let redactor = crate::telemetry::Redactor::new(&config.telemetry);
        crate::telemetry::watch_approvals(ledger.clone(), cancel.child_token());
        let holds = Arc::new(crate::holds::Holds::default());
        holds.watch(
            ledger.clone(),
            clock.clone(),
            Duration::from_millis(config.approvals.poll_ms),
            cancel.child_token(),
        );
        let notifier = match mode {
            Mode::Serve => crate::notify::Notifier::start(
                &config.approvals.notify,
                &config.tls,
                ledger.clone(),
                clock.clone(),
                entropy.clone(),
                cancel.child_token(),
            )?,
            Mode::Inspect => crate::notify::Notifier::none(),
        };
        if mode == Mode::Serve {
            // Covers what a crash left uncovered, then keeps checkpointing.
            log.checkpoint().await?;
            log.spawn(cancel.child_token());
            crate::retention::spawn(
                ledger.clone(),
                clock.clone(),
                config.gateway.operation_ttl_ms,
                cancel.child_token(),
            );
        }
        let guards = crate::stages::decide::Guards::new(&config.guards);
        let runs = crate::runs::Runs::new(&config);
        let budgets = Arc::new(crate::budgets::Budgets::new(&config.budgets, clock.clone()));
        if mode == Mode::Serve {
            crate::fleet::start(
                crate::fleet::replica_id(),
                ledger.clone(),
                clock.clone(),
                budgets.clone(),
                cancel.child_token(),
            )
            .await;
        }
        // After the state dir's keys exist: they are credentials too.
        let held = crate::withheld::matcher(&config);
        let oauth = config.oauth.clone().map(|o| {
            crate::oauth::OAuth::new(
                o,
                config.callers.keys().cloned().collect(),
                config.tls.roots(),
                clock.clone(),
            )
        });
        let gw = Arc::new(Self {
            catalogs,
            limits,
            callers,
            oauth,
            reloading: Default::default(),
            ledger,
            log,
            sealer,
            clock,
            entropy,
            redactor,
            holds,
            cancels: Default::default(),
            sessions: Default::default(),
            openings: Default::default(),
            notifier,
            guards,
            runs,
            budgets,
            held,
            identities,
            personal: Default::default(),
            cancel,
            draining,
        });
        spawn_reaper(Arc::downgrade(&gw), gw.cancel.child_token());
        Ok(gw)
    }

    /// Waits until every upstream has listed its tools, or `within` passes.
    /// Returns the servers still down, with why.
    pub async fn wait_ready(&self, within: Duration) -> Vec<(String, String)> {
        let upstreams = self.catalogs.upstreams();
        // An `oauth` server the gateway has no account of its own at cannot
        // come up until an admin connects one: not waited for.
        let config = self.config();
        let own = crate::identity::gateway_caller(&config);
        let mut waited = Vec::new();
        for u in &upstreams {
            let oauth = config
                .servers
                .get(&u.name)
                .is_some_and(|s| s.identity.mode == crate::config::IdentityMode::Oauth);
            if !oauth
                || matches!(
                    self.ledger.connection(&own.tenant, &own.subject, &u.name).await,
                    Ok(Some(_))
                )
            {
                waited.push(u.ready(within));
            }
        }
        futures_util::future::join_all(waited).await;
        self.not_listed()
    }

    /// `wait_ready`, but an upstream that fails (a server that exits at
    /// start, a variable it lacks) is not waited for: its first failure
    /// settles it. What `import` waits for.
    pub async fn wait_settled(&self, within: Duration) -> Vec<(String, String)> {
        let upstreams = self.catalogs.upstreams();
        let waits = upstreams.iter().map(|u| u.settled(within));
        futures_util::future::join_all(waits).await;
        self.not_listed()
    }

    fn not_listed(&self) -> Vec<(String, String)> {
        self.catalogs
            .upstreams()
            .iter()
            .filter(|u| u.listing().is_none())
            .map(|u| (u.name.clone(), u.down_reason().unwrap_or_else(|| "still connecting".into())))
            .collect()
    }

    /// The config in force now (a reload may put another in force).
    pub fn config(&self) -> Arc<Config> {
        self.catalogs.config()
    }

    /// The policy in force now.
    pub fn policy(&self) -> Arc<PolicyEngine> {
        self.catalogs.live().policy.clone()
    }

    /// Re-reads the policy files alone; an invalid set leaves the one in
    /// force. Returns the new policy version. (`reload` re-reads everything.)
    pub fn reload_policy(&self) -> anyhow::Result<String> {
        let live = self.catalogs.live();
        let fresh = Arc::new(process::load_policy(&live.config)?);
        let version = fresh.version().to_string();
        self.catalogs.swap(Arc::new(live.with_policy(fresh)));
        tracing::info!(target: "toolgate::policy", policy_version = %version, "policy reloaded");
        Ok(version)
    }

    /// The caller of a bearer token given by hand (a sign-in form) rather
    /// than in an `Authorization` header: a `[callers]` token, else an
    /// OAuth access token when `[oauth]` is set; `None` if neither knows it.
    /// With it, the instant (ms) the token stops being accepted: an access
    /// token's expiry; none for a `[callers]` token, which is read at start
    /// and ends with the process (a removed token needs a restart).
    pub async fn authenticate(
        &self,
        token: &str,
    ) -> Option<(Arc<toolgate_core::Caller>, Option<i64>)> {
        if let Some(caller) = self.callers.by_token(token) {
            return Some((caller, None));
        }
        match &self.oauth {
            Some(oauth) => {
                oauth.admit(token).await.ok().map(|(caller, until)| (caller, Some(until)))
            }
            None => None,
        }
    }

    /// `caller` approves or denies approval `id`, saying why: the one way
    /// the admin API and the console decide (the CLI decides through the
    /// same ledger call). Nobody decides their own call, or another tenant's;
    /// calls held for it answer at once.
    pub async fn decide_approval(
        &self,
        caller: &toolgate_core::Caller,
        id: &str,
        approve: bool,
        reason: &str,
    ) -> Result<toolgate_core::approval::Approval, DecideError> {
        if reason.trim().is_empty() {
            return Err(DecideError::NoReason);
        }
        let decider = toolgate_ledger::Decider {
            name: &caller.name,
            subject: &caller.subject,
            tenant: &caller.tenant,
        };
        let a = self
            .ledger
            .decide_approval(id, approve, decider, reason.trim(), self.clock.now_ms())
            .await?;
        tracing::info!(target: "toolgate::approval", approval = %a.id, state = a.state.as_str(), approver = %caller.name, "approval decided");
        self.holds.ring(&a.id);
        Ok(a)
    }

    /// Cancelled when the gateway stops (`stop`): its upstream supervisors end.
    pub fn cancellation(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Resolves when shutdown has begun (see `begin_shutdown`).
    pub fn draining(&self) -> CancellationToken {
        self.draining.clone()
    }

    /// `draining`, borrowed: what every call's approve stage holds, without
    /// a clone of the token (which takes a lock shared by all calls).
    pub(crate) fn draining_ref(&self) -> &CancellationToken {
        &self.draining
    }

    /// Ends long-lived streams (`subscriptions/listen`) so in-flight calls can
    /// finish and the server can stop; upstreams stay up until `stop`.
    pub fn begin_shutdown(&self) {
        self.draining.cancel();
    }

    /// Stops the upstream supervisors (stdio children are killed).
    pub fn stop(&self) {
        self.cancel.cancel();
    }

    /// Stops, after a last checkpoint covering every receipt so far.
    pub async fn shutdown(&self) {
        self.stop();
        if let Err(e) = self.log.checkpoint().await {
            tracing::error!(target: "toolgate::log", error = %format!("{e:#}"), "cannot sign the shutdown checkpoint; the next start signs one");
        }
    }
}

/// Reaps idle people's processes (`crate::personal`) every 10 s while the
/// gateway lives.
fn spawn_reaper(gw: std::sync::Weak<Gateway>, cancel: CancellationToken) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(10)) => {}
                _ = cancel.cancelled() => return,
            }
            let Some(gw) = gw.upgrade() else { return };
            gw.personal.reap(&gw.config(), gw.clock.now_ms());
        }
    });
}

/// Why a decision on an approval was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// Every decision records why.
    #[error("give a reason: every decision records why")]
    NoReason,
    /// The ledger refused it (not found, not pending, your own call, …).
    #[error(transparent)]
    Ledger(#[from] toolgate_ledger::LedgerError),
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// Every file under `dir` with its mode, folders included.
    fn modes(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, bool, u32)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            out.push((path.clone(), meta.is_dir(), meta.permissions().mode() & 0o777));
            if meta.is_dir() {
                modes(&path, out);
            }
        }
    }

    /// The ledger (and its `-wal` and `-shm`), the keys, the key history,
    /// the requestState key: nothing a started gateway writes may be read
    /// by another user, whatever the umask lets through.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn everything_a_started_gateway_writes_is_owner_only() {
        // SAFETY: the umask is the process's; nextest runs each test in its own.
        unsafe { libc::umask(0o022) };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toolgate.toml");
        // Nothing listens on port 9 (discard): the upstream stays down, which does not matter here.
        std::fs::write(&path, "[gateway]\nstate_dir = \"state/nested\"\n\n[servers.away]\nurl = \"http://127.0.0.1:9/mcp\"\n\n[callers.agent]\ntenant = \"atlas\"\nanonymous = true\n").unwrap();
        let gateway = Gateway::start(Config::load(&path).unwrap(), Mode::Serve).await.unwrap();
        let mut found = Vec::new();
        modes(&dir.path().join("state"), &mut found);
        let names: Vec<String> = found
            .iter()
            .map(|(p, _, _)| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for name in ["ledger.sqlite3", "ledger.sqlite3-wal", "ledger.sqlite3-shm"] {
            assert!(names.iter().any(|n| n == name), "{name} among {names:?}");
        }
        for (path, is_dir, mode) in &found {
            assert_eq!(*mode, if *is_dir { 0o700 } else { 0o600 }, "{}", path.display());
        }
        gateway.stop();
    }
}
