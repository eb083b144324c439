//! One spawn's box, made in the gateway before the fork: the child then
//! only applies it (`child::enter`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::child::{self, ChildPart, IdMaps, PROXY_PORT};
use super::host::{ProcessLimit, Support};
use super::proxy::Counts;
use super::{Network, Profile};

/// What stays with the gateway: the proxy's socket as it arrives, and the
/// cgroup to remove when the box is gone.
pub(crate) struct Prepared {
    /// Taken into the spawn's `pre_exec`.
    pub(crate) child: Option<ChildPart>,
    /// The variables the box adds to the server's environment.
    pub(crate) env: BTreeMap<String, OsString>,
    /// Where the child sends the proxy's listening socket.
    pub(crate) proxy_receiver: Option<OwnedFd>,
    pub(crate) cgroup: Option<Cgroup>,
    allowed: Arc<[super::Allowed]>,
}

/// A running box's parts on the gateway's side: its proxy and its cgroup,
/// which end with it.
pub(crate) struct Boxed {
    proxy: Option<tokio::task::JoinHandle<()>>,
    cgroup: Option<Cgroup>,
}

impl Boxed {
    /// After the spawn: serves the proxy socket the child sent, if any.
    pub(crate) fn start(
        server: &str,
        prepared: Prepared,
        counts: Arc<Counts>,
    ) -> Result<Self, String> {
        let Prepared { proxy_receiver, cgroup, allowed, .. } = prepared;
        let mut boxed = Self { proxy: None, cgroup };
        if let Some(receiver) = proxy_receiver {
            let listener = child::receive_listener(&receiver)
                .map_err(|e| format!("the proxy's socket did not arrive: {e}"))?;
            let listener = std::net::TcpListener::from(listener);
            listener.set_nonblocking(true).map_err(|e| format!("the proxy's socket: {e}"))?;
            let listener = tokio::net::TcpListener::from_std(listener)
                .map_err(|e| format!("the proxy's socket: {e}"))?;
            boxed.proxy =
                Some(tokio::spawn(super::proxy::serve(listener, server.into(), allowed, counts)));
        }
        Ok(boxed)
    }
}

impl Drop for Boxed {
    fn drop(&mut self) {
        if let Some(proxy) = &self.proxy {
            proxy.abort();
        }
        if let Some(cgroup) = self.cgroup.take() {
            // Waits for the box's last processes to go: not on the runtime.
            std::thread::spawn(move || cgroup.remove());
        }
    }
}

/// The variables naming CA bundles: the files they name are readable in
/// the box, as the system's certificates are.
pub const CA_VARIABLES: &[&str] = &[
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
    "GIT_SSL_CAINFO",
];

impl Prepared {
    /// The box of `profile` for `program` (resolved on PATH), on a host
    /// that offers `support`, for server `name`.
    pub(crate) fn new(
        name: &str,
        profile: &Profile,
        program: &str,
        support: &Support,
    ) -> Result<Self, String> {
        if !support.can_box() {
            return Err(support.summary());
        }
        for (key, list) in [("read", &profile.read), ("write", &profile.write)] {
            if let Some(gone) = list.iter().find(|p| !p.exists()) {
                return Err(format!(
                    "servers.{name}.sandbox.{key}: {} does not exist (make it, or take it off the list)",
                    gone.display()
                ));
            }
        }
        make_home(&profile.home)?;
        let mut also_read = program_tree(program);
        also_read.extend(
            CA_VARIABLES
                .iter()
                .filter_map(std::env::var_os)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute()),
        );

        let mut namespaces = libc::CLONE_NEWUSER | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
        if profile.network != Network::All {
            namespaces |= libc::CLONE_NEWNET;
        }
        let (proxy_sender, proxy_receiver) = match profile.network {
            Network::Allow(_) => {
                let (a, b) = UnixStream::pair()
                    .map_err(|e| format!("cannot make the proxy's socket pair: {e}"))?;
                (Some(OwnedFd::from(a)), Some(OwnedFd::from(b)))
            }
            _ => (None, None),
        };
        let cgroup = match &support.processes {
            ProcessLimit::Cgroup(parent) => {
                Some(Cgroup::make(parent, name, profile.limits.processes)?)
            }
            _ => None,
        };
        let cgroup_procs = match &cgroup {
            Some(c) => Some(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(c.dir.join("cgroup.procs"))
                    .map_err(|e| format!("cannot open {}: {e}", c.dir.display()))?
                    .into(),
            ),
            None => None,
        };
        let ruleset = super::landlock_rules::ruleset(profile, &also_read)?;
        // SAFETY: getpid cannot fail.
        let filters = super::seccomp::programs(unsafe { libc::getpid() })?;
        let child = ChildPart {
            maps: IdMaps::new(),
            namespaces,
            limits: profile.limits,
            nproc: support.processes == ProcessLimit::Rlimit,
            cgroup_procs,
            proxy_sender,
            ruleset: Some(ruleset),
            filters,
        };
        let allowed = match &profile.network {
            Network::Allow(list) => list.clone().into(),
            _ => Arc::from([]),
        };
        Ok(Self { child: Some(child), env: environment(profile), proxy_receiver, cgroup, allowed })
    }
}

/// HOME, the temporary folder and the caches an `npx` or `uvx` start
/// fills, all in the box's own folder; and the proxy, for an allow-list.
fn environment(profile: &Profile) -> BTreeMap<String, OsString> {
    let home = &profile.home;
    let at = |sub: &str| home.join(sub).into_os_string();
    let mut env = BTreeMap::from([
        ("HOME".to_string(), home.clone().into_os_string()),
        ("TMPDIR".to_string(), at("tmp")),
        ("XDG_CACHE_HOME".to_string(), at(".cache")),
        ("XDG_CONFIG_HOME".to_string(), at(".config")),
        ("XDG_DATA_HOME".to_string(), at(".local/share")),
        ("XDG_STATE_HOME".to_string(), at(".local/state")),
        ("npm_config_cache".to_string(), at(".npm")),
    ]);
    if let Network::Allow(_) = profile.network {
        let proxy = OsString::from(format!("http://127.0.0.1:{PROXY_PORT}"));
        for name in
            ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
        {
            env.insert(name.to_string(), proxy.clone());
        }
        for name in ["NO_PROXY", "no_proxy"] {
            env.insert(name.to_string(), "localhost,127.0.0.1,::1".into());
        }
        // Node's own `https` and `fetch` follow the variables above only
        // when told to (Node 22.21+, 24+); npm and uv follow them anyway.
        env.insert("NODE_USE_ENV_PROXY".to_string(), "1".into());
    }
    env
}

/// The box's folder and its temporary folder, owner-only, neither made
/// through a link (a box could plant one in its own folder before a restart).
fn make_home(home: &Path) -> Result<(), String> {
    for dir in [home.to_path_buf(), home.join("tmp")] {
        crate::owner_only::create_private_dir(&dir)
            .map_err(|e| format!("cannot make the box's folder: {e:#}"))?;
    }
    Ok(())
}

/// What `program` needs to run, readable: the file exec finds (on PATH
/// unless it names a path) and, as written and as its links resolve, the
/// install tree it sits in when that is a Python venv or prefix or a Node
/// prefix (`PREFIX/bin/NAME`): a venv's `python` is a link to a Python
/// whose standard library is outside the system paths.
fn program_tree(program: &str) -> Vec<PathBuf> {
    let found = if program.contains('/') {
        Some(PathBuf::from(program))
    } else {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
        })
    };
    let Some(found) = found else { return vec![] };
    let mut out = vec![];
    let mut hop = Some(found.clone());
    // The path as written, each link it passes through, and where it ends.
    for _ in 0..8 {
        let Some(path) = hop.take() else { break };
        let path = if path.is_absolute() {
            path
        } else {
            std::env::current_dir().map(|d| d.join(&path)).unwrap_or(path)
        };
        if let Some(prefix) = path
            .parent()
            .filter(|bin| bin.file_name().is_some_and(|n| n == "bin"))
            .and_then(Path::parent)
            .filter(|p| is_install_tree(p))
        {
            out.push(prefix.to_path_buf());
        }
        hop = std::fs::read_link(&path)
            .ok()
            .map(|target| path.parent().map_or(target.clone(), |dir| dir.join(&target)));
        out.push(path);
    }
    out.extend(std::fs::canonicalize(&found).ok());
    out
}

/// A venv, a Python prefix or a Node prefix: never a home folder that
/// merely has a `bin`.
fn is_install_tree(prefix: &Path) -> bool {
    let has_python = std::fs::read_dir(prefix.join("lib")).is_ok_and(|entries| {
        entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with("python3"))
    });
    prefix.join("pyvenv.cfg").is_file() || has_python || prefix.join("lib/node_modules").is_dir()
}

/// A box's pids cgroup, removed once the box is empty.
pub(crate) struct Cgroup {
    pub(crate) dir: PathBuf,
}

impl Cgroup {
    fn make(parent: &Path, name: &str, processes: u64) -> Result<Self, String> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let safe: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
            .take(64)
            .collect();
        let dir = parent.join(format!(
            "toolgate-{}-{safe}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir)
            .map_err(|e| format!("cannot make the box's pids cgroup {}: {e}", dir.display()))?;
        let cgroup = Self { dir };
        std::fs::write(cgroup.dir.join("pids.max"), processes.to_string())
            .map_err(|e| format!("cannot limit the box's processes: {e}"))?;
        Ok(cgroup)
    }

    /// Ends whatever is left in the box and removes the cgroup.
    pub(crate) fn remove(&self) {
        for _ in 0..50 {
            let pids = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            for pid in pids.lines().filter_map(|l| l.trim().parse::<libc::pid_t>().ok()) {
                // SAFETY: kill(2) touches no memory of ours.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        tracing::warn!(cgroup = %self.dir.display(), "a box's pids cgroup could not be removed");
    }
}
