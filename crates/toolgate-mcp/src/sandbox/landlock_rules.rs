//! The box's filesystem, as a Landlock ruleset made in the gateway: the
//! system paths read-only, the box's grants, its home. Everything else,
//! toolgate's state, keys, secrets, config and ledger among it, and the
//! home folder, is out of reach, listing included.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, Scope, path_beneath_rules,
};

use super::Profile;

/// What every program needs to run, read-only: binaries, libraries, the
/// shared data of /usr, and the named parts of /etc a TLS client, a
/// resolver, a package manager or a locale reads. Not /etc as a whole: it
/// may hold toolgate's own config (/etc/toolgate) and other secrets.
pub const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/ssl",
    "/etc/pki",
    "/etc/crypto-policies",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/nsswitch.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/passwd",
    "/etc/group",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/os-release",
    "/etc/mime.types",
    "/etc/locale.alias",
    "/etc/npmrc",
    "/etc/pip.conf",
    "/etc/uv",
    "/etc/python3",
    "/etc/python3.11",
    "/etc/python3.12",
    "/etc/python3.13",
    "/etc/gitconfig",
    "/proc",
    "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
    "/dev/random",
    "/dev/urandom",
];

/// Devices every program may write. Not /dev/pts, /dev/tty or /dev/shm:
/// a terminal of the person running toolgate, or another process's shared
/// memory, is no server's business.
pub const SYSTEM_WRITE: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// The ABI this ruleset is written for; an older kernel enforces what it
/// knows (the host probe says which).
const ABI_WANTED: ABI = ABI::V6;

/// The ruleset for `profile`, with `also_read` (the program, the CA files
/// its variables name) beside the grants.
pub(crate) fn ruleset(profile: &Profile, also_read: &[PathBuf]) -> Result<RulesetCreated, String> {
    let fail = |e: landlock::RulesetError| format!("Landlock: {e}");
    let read = AccessFs::from_read(ABI_WANTED);
    let all = AccessFs::from_all(ABI_WANTED);
    let system = SYSTEM_READ.iter().map(Path::new).filter(|p| p.exists());
    let devices = SYSTEM_WRITE.iter().map(Path::new).filter(|p| p.exists());
    Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(fail)?
        .scope(Scope::from_all(ABI_WANTED))
        .map_err(fail)?
        .create()
        .map_err(fail)?
        .add_rules(path_beneath_rules(
            system
                .map(Path::to_path_buf)
                .chain(also_read.iter().cloned())
                .chain(profile.read.iter().cloned()),
            read,
        ))
        .map_err(fail)?
        // Devices are read and written, never executed or made.
        .add_rules(path_beneath_rules(
            devices,
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev,
        ))
        .map_err(fail)?
        .add_rules(path_beneath_rules(profile.write.iter().chain([&profile.home]), all))
        .map_err(fail)
}
