//! What this machine can build a box from, probed once per process: the
//! gateway's start, `doctor` and the console all say the same thing.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// How the processes of a box are counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessLimit {
    /// RLIMIT_NPROC, counted in the box's own user namespace.
    Rlimit,
    /// A pids cgroup of its own under this folder (toolgate runs as root,
    /// whom RLIMIT_NPROC exempts).
    Cgroup(PathBuf),
    /// Not limited; why.
    Unlimited(String),
}

/// What the host offers.
#[derive(Debug, Clone)]
pub struct Support {
    /// Why no box can be built here (each a missing layer and its cause);
    /// empty when one can.
    pub missing: Vec<String>,
    /// The Landlock ABI (0: none).
    pub landlock_abi: i32,
    /// How processes are limited.
    pub processes: ProcessLimit,
}

impl Support {
    /// Whether a box can be built.
    pub fn can_box(&self) -> bool {
        self.missing.is_empty()
    }

    /// One line per layer: what is in force, and what is not.
    pub fn layers(&self) -> Vec<(String, bool)> {
        let mut out = vec![];
        let ok = |missing: &[String], what: &str| !missing.iter().any(|m| m.starts_with(what));
        out.push((
            "user namespace: the server is its own user, with no capability outside its box"
                .to_string(),
            ok(&self.missing, "user namespace"),
        ));
        out.push((
            "network namespace: loopback only, or toolgate's CONNECT proxy for an allow-list"
                .to_string(),
            ok(&self.missing, "network namespace"),
        ));
        out.push((
            format!(
                "Landlock ABI {}: the filesystem is the system paths and the box's grants",
                self.landlock_abi
            ),
            self.landlock_abi >= 1,
        ));
        out.push((
            "Landlock scopes: no signal to, nor abstract socket of, anything outside the box"
                .to_string(),
            self.landlock_abi >= 6,
        ));
        out.push((
            "seccomp: no ptrace, mount, namespace, kernel-module or keyring calls".to_string(),
            ok(&self.missing, "seccomp"),
        ));
        match &self.processes {
            ProcessLimit::Rlimit => {
                out.push(("processes: RLIMIT_NPROC in the box's user namespace".to_string(), true))
            }
            ProcessLimit::Cgroup(dir) => {
                out.push((format!("processes: a pids cgroup under {}", dir.display()), true))
            }
            ProcessLimit::Unlimited(why) => {
                out.push((format!("processes: not limited ({why})"), false))
            }
        }
        out
    }

    /// What isolation a server would have here without a box, for the
    /// messages that refuse to start one.
    pub fn summary(&self) -> String {
        if self.can_box() {
            "stdio servers run boxed".to_string()
        } else {
            format!("this host cannot build a sandbox: {}", self.missing.join("; "))
        }
    }
}

/// The host's support, probed on first use.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(probe)
}

fn probe() -> Support {
    let mut missing = Vec::new();
    if let Err(e) = try_unshare(libc::CLONE_NEWUSER) {
        missing.push(format!(
            "user namespace: cannot make one ({e}); on Debian and Ubuntu check `sysctl \
                kernel.unprivileged_userns_clone` and \
                `kernel.apparmor_restrict_unprivileged_userns`, under systemd `RestrictNamespaces=`"
        ));
    } else if let Err(e) = try_unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) {
        missing.push(format!("network namespace: cannot make one ({e})"));
    }
    let landlock_abi = landlock_abi();
    if landlock_abi < 1 {
        missing.push(
            "Landlock: not offered to toolgate (Linux 5.13 or later, with `lsm=…,landlock` on its \
                command line; under systemd, a `SystemCallFilter=` that leaves out \
                landlock_create_ruleset hides it too)"
                .to_string(),
        );
    }
    if !seccomp_filters() {
        missing
            .push("seccomp: the kernel does not offer filters (CONFIG_SECCOMP_FILTER)".to_string());
    }
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let processes = if unsafe { libc::geteuid() } != 0 {
        ProcessLimit::Rlimit
    } else {
        match pids_cgroup() {
            Ok(dir) => ProcessLimit::Cgroup(dir),
            Err(why) => ProcessLimit::Unlimited(format!(
                "toolgate runs as root, whom RLIMIT_NPROC exempts, and {why}"
            )),
        }
    };
    Support { missing, landlock_abi, processes }
}

/// Starts `true` in new namespaces `flags`, mapping our ids into the user
/// namespace as the box does.
fn try_unshare(flags: libc::c_int) -> std::io::Result<()> {
    let maps = super::child::IdMaps::new();
    let program = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("true");
    let mut command = Command::new(program);
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: the closure makes system calls only, on memory prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            if libc::unshare(flags) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            maps.write()
        });
    }
    let status = command.status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("the probe ended {status}")))
    }
}

/// The Landlock ABI the kernel offers, 0 for none.
pub fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute and size 0, the call only returns the ABI version.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(abi).unwrap_or(0).max(0)
}

fn seccomp_filters() -> bool {
    // SAFETY: PR_GET_SECCOMP reads our own mode; it returns -1 (EINVAL) only without CONFIG_SECCOMP.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP) };
    mode >= 0
        && std::fs::read_to_string("/proc/self/status")
            .is_ok_and(|s| s.contains("Seccomp_filters:") || s.contains("Seccomp:"))
}

/// Removes the empty cgroups of boxes whose gateway is gone (one killed
/// before it could remove them).
fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix("toolgate-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// A folder where toolgate (as root) can make a pids cgroup for each box:
/// its own pids cgroup, under cgroup v1's `pids` hierarchy or cgroup v2.
fn pids_cgroup() -> Result<PathBuf, String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo is unreadable ({e})"))?;
    let ours = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup is unreadable ({e})"))?;
    let mut candidates = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let mount = left.split(' ').nth(4).unwrap_or_default();
        let mut right = right.split(' ');
        let (kind, options) = (right.next().unwrap_or_default(), right.nth(1).unwrap_or_default());
        let path = if kind == "cgroup" && options.split(',').any(|o| o == "pids") {
            ours.lines().find_map(|l| {
                l.split(':')
                    .nth(1)
                    .filter(|c| c.split(',').any(|c| c == "pids"))
                    .and(l.splitn(3, ':').nth(2))
            })
        } else if kind == "cgroup2" {
            ours.lines().find_map(|l| l.strip_prefix("0::"))
        } else {
            None
        };
        if let Some(path) = path {
            candidates.push(Path::new(mount).join(path.trim_start_matches('/')));
        }
    }
    for dir in &candidates {
        let probe = dir.join(format!("toolgate-probe-{}", std::process::id()));
        if std::fs::create_dir(&probe).is_ok() {
            let usable = probe.join("pids.max").exists();
            let _ = std::fs::remove_dir(&probe);
            if usable {
                sweep(dir);
                return Ok(dir.clone());
            }
        }
    }
    Err("no pids cgroup could be made here (cgroup v1 `pids`, or v2 with the pids controller delegated)".to_string())
}
