//! The box `import` writes for each stdio server (`[servers.NAME.sandbox]`,
//! docs/SANDBOX.md), read from how the client starts it: the folders and
//! files its arguments name, the folder a known server keeps its data in,
//! and the hosts its launcher fetches from at start, each with why; and
//! what was left out, with why.
//!
//! The rules are pure: the disk is asked through [`Disk`], so they are
//! tested on the official servers' own argument lists. What they never
//! grant, whatever the arguments say: the whole disk, the home folder (or
//! a folder that holds it), and the import's own folder (the config, its
//! state — keys, ledger — and the other servers' secrets) or anything that
//! holds it or is in it. The installation the command runs from (a venv,
//! a Node prefix) is not written here: the box reads it at each start, as
//! it finds it then.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::toml_text::{one_line, quoted};

/// A grant, or a thing left out: what (a path, a host; empty for a plain
/// note) and why, both shown to the person.
#[derive(Debug, Clone, PartialEq)]
pub struct Why {
    pub what: String,
    pub why: String,
}

fn why(what: impl Into<String>, why: impl Into<String>) -> Why {
    Why { what: what.into(), why: why.into() }
}

/// What the box may reach over the network, and why.
#[derive(Debug, Clone, PartialEq)]
pub enum Network {
    /// `"none"`: the box's own loopback only.
    None(String),
    /// `"all"`: the host's network.
    All(String),
    /// An allow-list, each host with why.
    Hosts(Vec<Why>),
}

/// One stdio server's box.
#[derive(Debug, Clone, PartialEq)]
pub struct Grants {
    pub read: Vec<Why>,
    pub write: Vec<Why>,
    pub network: Network,
    /// Paths its arguments name that were not granted, and notes on what
    /// the box will not give it.
    pub left_out: Vec<Why>,
}

/// What the rules ask of the disk.
pub trait Disk {
    /// `path` with its links resolved, and whether it is a folder; `None`
    /// if nothing is there.
    fn look(&self, path: &Path) -> Option<(PathBuf, bool)>;
}

/// This machine's disk.
pub struct RealDisk;

impl Disk for RealDisk {
    fn look(&self, path: &Path) -> Option<(PathBuf, bool)> {
        let real = std::fs::canonicalize(path).ok()?;
        let dir = real.is_dir();
        Some((real, dir))
    }
}

/// Where the import runs: what `~` means and what is never granted.
pub struct Place<'a> {
    /// The person's home (`$HOME`).
    pub home: Option<PathBuf>,
    /// The import's own folder (the config, its state, its secrets).
    pub out: PathBuf,
    pub disk: &'a dyn Disk,
}

/// The registries the launchers fetch a package from at start.
const NPM: &str = "registry.npmjs.org";
const YARN: &str = "registry.yarnpkg.com";
const PYPI: [&str; 2] = ["pypi.org", "files.pythonhosted.org"];

/// What a known server is granted beyond what its arguments name.
enum Role {
    /// Its directories are the arguments after the package.
    Filesystem,
    /// `--repository PATH`.
    Git,
    /// `--db-path FILE`: SQLite writes beside the database.
    Sqlite,
    /// `MEMORY_FILE_PATH`: the file and the lock beside it.
    Memory,
    /// Hosts of its own, beside its launcher's registry.
    Hosts(&'static [&'static str], &'static str),
    /// A relay to the remote server its first URL argument names.
    Remote,
    /// The host's network.
    All(&'static str),
}

/// Servers import knows, by package (npm or PyPI, normalised), Python
/// module or program name.
const KNOWN: &[(&[&str], Role)] = &[
    (&["@modelcontextprotocol/server-filesystem", "mcp-server-filesystem"], Role::Filesystem),
    (&["mcp-server-git"], Role::Git),
    (&["mcp-server-sqlite"], Role::Sqlite),
    (&["@modelcontextprotocol/server-memory", "mcp-server-memory"], Role::Memory),
    (
        &["@modelcontextprotocol/server-github", "mcp-server-github"],
        Role::Hosts(&["api.github.com"], "the GitHub server calls GitHub's API"),
    ),
    (
        &["@modelcontextprotocol/server-gitlab", "mcp-server-gitlab"],
        Role::Hosts(
            &["gitlab.com"],
            "the GitLab server calls gitlab.com's API (with a GITLAB_API_URL of your own, name its host instead)",
        ),
    ),
    (
        &["@modelcontextprotocol/server-brave-search", "mcp-server-brave-search"],
        Role::Hosts(&["api.search.brave.com"], "the Brave Search server calls Brave's search API"),
    ),
    (
        &["@modelcontextprotocol/server-slack", "mcp-server-slack"],
        Role::Hosts(&["slack.com"], "the Slack server calls Slack's API"),
    ),
    (
        &["@modelcontextprotocol/server-google-maps", "mcp-server-google-maps"],
        Role::Hosts(&["maps.googleapis.com"], "the Google Maps server calls the Maps API"),
    ),
    (&["mcp-remote"], Role::Remote),
    (
        &["mcp-server-fetch", "@modelcontextprotocol/server-fetch"],
        Role::All(
            "the fetch server fetches whatever URL it is asked for, which no allow-list can name in advance",
        ),
    ),
    (
        &["@modelcontextprotocol/server-puppeteer", "mcp-server-puppeteer"],
        Role::All("the Puppeteer server browses whatever page it is asked for"),
    ),
    (
        &["@modelcontextprotocol/server-postgres", "mcp-server-postgres"],
        Role::All(
            "the Postgres server connects to its database directly, and the proxy serves HTTPS (CONNECT) only",
        ),
    ),
];

/// How a command starts its server.
struct Launch {
    /// The launcher (`npx`, `uvx`, …) and the hosts it fetches the package
    /// from at start; `None` for a program that runs as it is.
    launcher: Option<(String, Vec<String>)>,
    /// The package, Python module or program it runs, normalised.
    package: Option<String>,
    /// Where in `args` the package is named (not a path), if it is.
    package_at: Option<usize>,
    /// Where the server's own arguments start.
    server_args: usize,
}

/// A package as a name to look up: lower case, `_` as `-` (PyPI's
/// normalisation), without a version, extras or a range.
fn package_name(spec: &str) -> String {
    let (scope, rest) = match spec.strip_prefix('@') {
        Some(rest) => ("@", rest),
        None => ("", spec),
    };
    let end = rest.find(['@', '=', '<', '>', '~', '!', '[', ' ', ';']).unwrap_or(rest.len());
    format!("{scope}{}", &rest[..end]).to_ascii_lowercase().replace('_', "-")
}

/// A launcher's options from `start`: each option's value (for those in
/// `valued`, and `--opt=value`) and where its first operand is.
fn operands<'a>(
    args: &'a [String],
    start: usize,
    valued: &[&str],
) -> (Vec<(&'a str, &'a str)>, Option<usize>) {
    let mut options = Vec::new();
    let mut i = start;
    while let Some(a) = args.get(i) {
        if a == "--" {
            return (options, (i + 1 < args.len()).then_some(i + 1));
        }
        if !a.starts_with('-') || a == "-" {
            return (options, Some(i));
        }
        if let Some((key, value)) = a.split_once('=') {
            options.push((key, value));
            i += 1;
        } else if valued.contains(&a.as_str()) {
            if let Some(value) = args.get(i + 1) {
                options.push((a.as_str(), value.as_str()));
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    (options, None)
}

const NPX_VALUED: &[&str] = &[
    "-p",
    "--package",
    "-c",
    "--call",
    "--registry",
    "--cache",
    "--userconfig",
    "--prefix",
    "-w",
    "--workspace",
    "--node-options",
];
const UV_VALUED: &[&str] = &[
    "--from",
    "--with",
    "--with-editable",
    "--with-requirements",
    "-w",
    "--python",
    "-p",
    "--index",
    "--default-index",
    "--index-url",
    "-i",
    "--extra-index-url",
    "--find-links",
    "-f",
    "--directory",
    "--project",
    "--config-file",
    "--cache-dir",
    "--constraints",
    "-c",
    "--overrides",
    "--env-file",
    "--python-platform",
    "--index-strategy",
    "--keyring-provider",
    "--exclude-newer",
    "--prerelease",
    "--resolution",
    "--link-mode",
    "--color",
    "--allow-insecure-host",
];

/// The command's own name: `/usr/bin/npx` and `npx.cmd` are `npx`.
fn program(command: &str) -> String {
    let name = command.rsplit(['/', '\\']).next().unwrap_or(command);
    let name = name.strip_suffix(".cmd").or_else(|| name.strip_suffix(".exe")).unwrap_or(name);
    name.to_ascii_lowercase()
}

/// How `command args` starts its server: through which launcher, and
/// which package it runs.
fn launch(command: &str, args: &[String]) -> Launch {
    let name = program(command);
    let plain = |package: Option<String>| Launch {
        launcher: None,
        package,
        package_at: None,
        server_args: 0,
    };
    let hosts = |list: &[&str]| list.iter().map(ToString::to_string).collect::<Vec<_>>();
    // An npm-style launcher from `start`: `--package` names the package
    // (the operand is then its program), else the operand does.
    let npm = |start: usize, registry: &str| {
        let (options, at) = operands(args, start, NPX_VALUED);
        let named = options
            .iter()
            .find(|(k, _)| matches!(*k, "-p" | "--package"))
            .map(|(_, v)| package_name(v));
        let registry = options
            .iter()
            .find(|(k, _)| *k == "--registry")
            .and_then(|(_, v)| host_of(v))
            .unwrap_or_else(|| registry.to_string());
        let package = named.or_else(|| at.map(|i| package_name(&args[i])));
        Launch {
            launcher: Some((name.clone(), vec![registry])),
            package,
            package_at: at,
            server_args: at.map_or(args.len(), |i| i + 1),
        }
    };
    // A uv-style launcher from `start`: `--from` names the package, else the operand (its program) does.
    let python = |start: usize, valued: &[&str], from: &str| {
        let (options, at) = operands(args, start, valued);
        let named = options.iter().find(|(k, _)| *k == from).map(|(_, v)| package_name(v));
        let package = named.or_else(|| at.map(|i| package_name(&args[i])));
        Launch {
            launcher: Some((name.clone(), hosts(&PYPI))),
            package,
            package_at: at,
            server_args: at.map_or(args.len(), |i| i + 1),
        }
    };
    let first = args.first().map(String::as_str);
    match (name.as_str(), first) {
        ("npx" | "bunx" | "pnpx", _) => npm(0, NPM),
        ("pnpm", Some("dlx")) | ("npm", Some("exec" | "x")) => npm(1, NPM),
        ("yarn", Some("dlx")) => npm(1, YARN),
        ("uvx", _) => python(0, UV_VALUED, "--from"),
        ("pipx", Some("run")) => {
            python(1, &["--spec", "--python", "--pip-args", "--index-url", "-i"], "--spec")
        }
        ("uv", _) => {
            // `uv [options] run …` or `uv [options] tool run …`.
            let (_, at) = operands(args, 0, UV_VALUED);
            match at.map(|i| (i, args[i].as_str(), args.get(i + 1).map(String::as_str))) {
                Some((i, "run", _)) => python(i + 1, UV_VALUED, "--from"),
                Some((i, "tool", Some("run"))) => python(i + 2, UV_VALUED, "--from"),
                _ => plain(None),
            }
        }
        (interpreter, _) if interpreter.starts_with("python") => {
            let module = args
                .iter()
                .position(|a| a == "-m")
                .and_then(|i| args.get(i + 1))
                .map(|m| package_name(m));
            plain(module)
        }
        _ => plain(Some(package_name(&name))),
    }
}

/// The host of a registry URL (`https://npm.example.com/`), as an allow-list names it.
fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?;
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => (name, Some(port)),
        _ => (host, None),
    };
    let default = if url.starts_with("http://") { "80" } else { "443" };
    (!name.is_empty()).then(|| match port {
        Some(p) if p != "443" => format!("{name}:{p}"),
        None if default == "80" => format!("{name}:80"),
        _ => name.to_string(),
    })
}

/// The rules, as they run over one server.
struct Rules<'a> {
    place: &'a Place<'a>,
    home: Option<PathBuf>,
    out: PathBuf,
    grants: Grants,
}

enum Access {
    Read,
    Write,
}

impl Rules<'_> {
    /// `~` and `~/…` as the home folder; an absolute path as it is;
    /// anything else `None`.
    fn expand(&self, raw: &str) -> Option<PathBuf> {
        if raw == "~" || raw.starts_with("~/") {
            return self
                .place
                .home
                .as_ref()
                .map(|h| h.join(raw.trim_start_matches('~').trim_start_matches('/')));
        }
        raw.starts_with('/').then(|| PathBuf::from(raw))
    }

    /// Why `real` (links resolved) is never granted, if it is not.
    fn refused(&self, real: &Path) -> Option<&'static str> {
        if real.parent().is_none() {
            return Some("a whole-disk grant is never written; name the folder it needs");
        }
        if self.home.as_ref().is_some_and(|home| home.starts_with(real)) {
            return Some("a whole-home grant is never written; name the folder it needs");
        }
        if self.out.starts_with(real) {
            return Some(
                "it holds this config's own folder (its state: keys and ledger; the servers' \
                    secrets), which no server is granted; name a folder beside it",
            );
        }
        if real.starts_with(&self.out) {
            return Some(
                "it is inside this config's own folder (its state: keys and ledger; the servers' secrets), which no server is granted",
            );
        }
        None
    }

    fn leave(&mut self, what: &str, reason: impl Into<String>) {
        let note = why(what, reason);
        if !self.grants.left_out.contains(&note) {
            self.grants.left_out.push(note);
        }
    }

    /// A relative path: what it names depends on the folder the server is
    /// started in, which is not the client's.
    fn relative(&mut self, raw: &str) {
        self.leave(
            raw,
            "a relative path names a folder only from where the server starts: the client starts \
                it in a folder of its own choosing, toolgate in the one it runs in; write it \
                absolute, in `args` and here",
        );
    }

    /// Grants `path` (as written, `~` expanded) as `access` says, unless a
    /// rule refuses it; says why either way.
    fn grant(&mut self, path: &Path, access: Access, reason: &str) -> bool {
        // `/srv/docs/` and `/srv/./docs` are `/srv/docs`: one grant, shown one way.
        let path: PathBuf = path.components().collect();
        let path = path.as_path();
        let shown = path.display().to_string();
        let Some((real, _)) = self.place.disk.look(path) else {
            self.leave(&shown, format!("{reason}, but nothing is there: a grant must exist when the server starts; create it and add it here"));
            return false;
        };
        if let Some(refusal) = self.refused(&real) {
            self.leave(
                &shown,
                if real.as_path() == path {
                    refusal.to_string()
                } else {
                    format!("{refusal} (it is {})", real.display())
                },
            );
            return false;
        }
        let write = matches!(access, Access::Write);
        let g = &mut self.grants;
        if g.write.iter().any(|w| w.what == shown)
            || (!write && g.read.iter().any(|r| r.what == shown))
        {
            return true;
        }
        if write {
            g.read.retain(|r| r.what != shown);
            g.write.push(why(shown, reason));
        } else {
            g.read.push(why(shown, reason));
        }
        true
    }

    /// An argument that names a path: granted by kind; a relative one noted.
    fn argument(&mut self, raw: &str, flag: Option<&str>) {
        if raw.contains("://") {
            return;
        }
        if raw == "." || raw == ".." || raw.starts_with("./") || raw.starts_with("../") {
            return self.relative(raw);
        }
        let Some(path) = self.expand(raw) else { return };
        let named = flag.map(|f| format!(" ({f})")).unwrap_or_default();
        match self.place.disk.look(&path) {
            Some((_, true)) => {
                self.grant(
                    &path,
                    Access::Write,
                    &format!("a folder its arguments name{named}: it may read and write there"),
                );
            }
            Some((_, false)) if is_script(&path) => self.script(&path, &named),
            Some(_) => {
                self.grant(
                    &path,
                    Access::Read,
                    &format!("a file its arguments name{named}: read only"),
                );
            }
            None => self.leave(
                &path.display().to_string(),
                format!(
                    "its arguments name it{named}, but nothing is there: not granted; if the \
                        server makes it, make it first and add it to `write`"
                ),
            ),
        }
    }

    /// A script its interpreter runs: its project (the nearest folder above
    /// it with a package.json or pyproject.toml, for the modules beside
    /// it), else the file alone.
    fn script(&mut self, path: &Path, named: &str) {
        let project = path
            .ancestors()
            .skip(1)
            .take_while(|dir| {
                self.place.disk.look(dir).is_some_and(|(real, _)| self.refused(&real).is_none())
            })
            .find(|dir| {
                ["package.json", "pyproject.toml", "setup.py", "node_modules"]
                    .iter()
                    .any(|m| self.place.disk.look(&dir.join(m)).is_some())
            });
        match project {
            Some(dir) => {
                self.grant(
                    dir,
                    Access::Read,
                    &format!(
                        "the project of the script {}{named}: its modules are beside it",
                        path.display()
                    ),
                );
            }
            None => {
                self.grant(
                    path,
                    Access::Read,
                    &format!("the script its arguments name{named}: read only"),
                );
            }
        }
    }
}

fn is_script(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| ["js", "mjs", "cjs", "ts", "mts", "py"].iter().any(|s| e == *s))
}

/// The box for a stdio server started as `command args`, with `env` its
/// variables whose values the client config wrote out.
pub fn grants(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    place: &Place,
) -> Grants {
    let real = |p: &Path| place.disk.look(p).map(|(r, _)| r).unwrap_or_else(|| p.to_path_buf());
    let mut rules = Rules {
        place,
        home: place.home.as_deref().map(real),
        out: real(&place.out),
        grants: Grants {
            read: Vec::new(),
            write: Vec::new(),
            network: Network::None(String::new()),
            left_out: Vec::new(),
        },
    };
    let launch = launch(command, args);
    let role = launch
        .package
        .as_deref()
        .and_then(|p| KNOWN.iter().find(|(names, _)| names.contains(&p)))
        .map(|(_, role)| role);
    let mut done = vec![false; args.len()];
    if let Some(i) = launch.package_at {
        done[i] = true;
    }

    match role {
        Some(Role::Filesystem) => {
            let dirs: Vec<usize> =
                (launch.server_args..args.len()).filter(|&i| !args[i].starts_with('-')).collect();
            if dirs.is_empty() {
                rules.leave(
                    "",
                    "no directory in its arguments: it then serves the client's roots, which the \
                        box does not reach; name them in `write`",
                );
            }
            for i in dirs {
                done[i] = true;
                match rules.expand(&args[i]) {
                    Some(path) => {
                        rules.grant(
                            &path,
                            Access::Write,
                            "the filesystem server's directories, from its arguments",
                        );
                    }
                    None => rules.relative(&args[i]),
                }
            }
        }
        Some(Role::Git) => {
            for (i, value) in flag_values(args, &["--repository", "-r"]) {
                done[i] = true;
                match rules.expand(value) {
                    Some(path) => {
                        rules.grant(
                            &path,
                            Access::Write,
                            "the git server's repository (--repository)",
                        );
                    }
                    None => rules.relative(value),
                }
            }
        }
        Some(Role::Sqlite) => {
            for (i, value) in flag_values(args, &["--db-path"]) {
                done[i] = true;
                match rules.expand(value).as_deref().and_then(Path::parent) {
                    Some(folder) => {
                        let folder = folder.to_path_buf();
                        rules.grant(
                            &folder,
                            Access::Write,
                            "the folder of the SQLite server's database (--db-path): SQLite writes \
                                the database and its journal there",
                        );
                    }
                    None => rules.relative(value),
                }
            }
        }
        Some(Role::Memory) => match env.get("MEMORY_FILE_PATH").map(|v| (v, rules.expand(v))) {
            Some((_, Some(file))) => {
                if let Some(folder) = file.parent().map(Path::to_path_buf) {
                    rules.grant(
                        &folder,
                        Access::Write,
                        "the folder of the memory server's file (MEMORY_FILE_PATH): it writes the \
                            file and a lock beside it",
                    );
                }
            }
            Some((raw, None)) => rules.relative(raw),
            None => rules.leave(
                "",
                "without MEMORY_FILE_PATH its memory file is inside its package, in npx's cache in \
                    the box's own home: a new version of the package starts a new file; set \
                    MEMORY_FILE_PATH to an absolute path to keep one",
            ),
        },
        _ => {}
    }

    // Every other argument that names a path; `--flag=PATH` too.
    for i in 0..args.len() {
        if done[i] {
            continue;
        }
        let a = &args[i];
        match a.split_once('=') {
            Some((flag, value)) if flag.starts_with('-') => rules.argument(value, Some(flag)),
            _ if a.starts_with('-') => {}
            _ => {
                let flag = i
                    .checked_sub(1)
                    .map(|p| args[p].as_str())
                    .filter(|p| p.starts_with("--") && !p.contains('=') && !done[i - 1]);
                rules.argument(a, flag);
            }
        }
    }

    let name = program(command);
    if matches!(name.as_str(), "docker" | "podman" | "nerdctl") {
        rules.leave(
            "",
            format!(
                "`{name}` reaches its daemon through a socket that is root on this machine, which \
                    import never grants: the container is a box of its own; to run it this way, \
                    write `sandbox = \"off\"` for this server instead"
            ),
        );
    }
    if let Some(Role::Remote) = role {
        rules.leave(
            "",
            "if it signs in with OAuth, its callback listens on this machine's loopback for the \
                browser, which a box with a network of its own does not share: write \
                network = \"all\" for it then",
        );
    }
    let mut grants = rules.grants;
    grants.network = network(&launch, role, &name, args);
    grants
}

/// Each `--flag VALUE` and `--flag=VALUE` of `flags`: the value's index and text.
fn flag_values<'a>(args: &'a [String], flags: &[&str]) -> Vec<(usize, &'a str)> {
    let mut out = Vec::new();
    for (i, a) in args.iter().enumerate() {
        if flags.contains(&a.as_str()) {
            if let Some(v) = args.get(i + 1) {
                out.push((i + 1, v.as_str()));
            }
        } else if let Some((_, v)) = a.split_once('=').filter(|(f, _)| flags.contains(f)) {
            out.push((i, v));
        }
    }
    out
}

fn network(launch: &Launch, role: Option<&Role>, name: &str, args: &[String]) -> Network {
    let remote = args
        .iter()
        .skip(launch.server_args)
        .find(|a| a.starts_with("https://") || a.starts_with("http://"));
    let plain_http =
        matches!(role, Some(Role::Remote)) && remote.is_some_and(|url| url.starts_with("http://"));
    let all = match role {
        Some(Role::All(reason)) => Some(*reason),
        _ if plain_http => Some(
            "mcp-remote relays to an http:// server, which the proxy does not carry (it serves CONNECT, for https)",
        ),
        _ => None,
    };
    if let Some(reason) = all {
        return Network::All(format!(
            "{reason}; \"all\" is the host's network, its loopback services included"
        ));
    }
    let mut hosts = Vec::new();
    if let Some((launcher, registries)) = &launch.launcher {
        hosts.extend(registries.iter().map(|h| {
            let from = match h.as_str() {
                "pypi.org" => "from PyPI's index",
                "files.pythonhosted.org" => "from the files PyPI's index points at",
                NPM => "from the npm registry",
                YARN => "from Yarn's registry",
                _ => "from the registry its arguments name (--registry)",
            };
            why(h, format!("{launcher} fetches the package and its dependencies {from} at start"))
        }));
    }
    if let Some(Role::Hosts(list, reason)) = role {
        hosts.extend(list.iter().map(|h| why(*h, *reason)));
    }
    if let Some(Role::Remote) = role {
        hosts.extend(
            remote
                .and_then(|url| host_of(url))
                .map(|h| why(h, "mcp-remote relays to the remote server its arguments name")),
        );
    }
    if hosts.is_empty() {
        return Network::None(format!(
            "`{name}` runs as installed and import knows of no host it calls; name the hosts it needs"
        ));
    }
    Network::Hosts(hosts)
}

impl Grants {
    /// What a config's header says once of every box: what a box is, how
    /// its network is written, and its default limits.
    pub const HEADER: &'static str = "\
# Each stdio server runs in a box (docs/SANDBOX.md): the system's files read-only, a home of its own
# under state/boxes/ (npx's and uv's caches), and only what its `sandbox` table grants, each with why.
# Its network is \"none\", \"all\", or hosts by name (`host`, `host:port`, `*.domain`) that it reaches
# through toolgate's proxy, each connection logged. Its limits are the defaults (memory_mb = 2048,
# processes = 256, open_files = 1024, cpu_seconds = 3600) unless its table sets one.
";

    /// `[servers.NAME.sandbox]`, each grant and each thing left out with
    /// why; the limits left to their defaults.
    pub fn table(&self, server: &str) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "[servers.{}.sandbox]", quoted(server));
        for (key, list) in [("read", &self.read), ("write", &self.write)] {
            if list.is_empty() {
                continue;
            }
            let _ = writeln!(t, "{key} = [");
            for g in list {
                let _ = writeln!(t, "  {},  # {}", quoted(&g.what), one_line(&g.why));
            }
            t.push_str("]\n");
        }
        for note in &self.left_out {
            if note.what.is_empty() {
                let _ = writeln!(t, "# {}", one_line(&note.why));
            } else {
                let _ = writeln!(
                    t,
                    "# Not granted: {} — {}",
                    one_line(&note.what),
                    one_line(&note.why)
                );
            }
        }
        match &self.network {
            Network::None(reason) => {
                let _ = writeln!(t, "network = \"none\"  # {}", one_line(reason));
            }
            Network::All(reason) => {
                let _ = writeln!(t, "network = \"all\"  # {}", one_line(reason));
            }
            Network::Hosts(hosts) => {
                t.push_str("network = [\n");
                for h in hosts {
                    let _ = writeln!(t, "  {},  # {}", quoted(&h.what), one_line(&h.why));
                }
                t.push_str("]\n");
            }
        }
        t
    }

    /// One line per grant and per thing left out, for the terminal (shown
    /// visibly by the caller).
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        lines.extend(self.read.iter().map(|g| format!("read {}: {}", g.what, g.why)));
        lines.extend(self.write.iter().map(|g| format!("write {}: {}", g.what, g.why)));
        match &self.network {
            Network::None(reason) => lines.push(format!("network none: {reason}")),
            Network::All(reason) => lines.push(format!("network all: {reason}")),
            Network::Hosts(hosts) => {
                lines.extend(hosts.iter().map(|h| format!("network {}: {}", h.what, h.why)))
            }
        }
        lines.extend(self.left_out.iter().map(|n| {
            if n.what.is_empty() {
                format!("note: {}", n.why)
            } else {
                format!("not granted {}: {}", n.what, n.why)
            }
        }));
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A disk of named folders and files, with links.
    #[derive(Default)]
    struct Fake {
        dirs: BTreeSet<PathBuf>,
        files: BTreeSet<PathBuf>,
        links: BTreeMap<PathBuf, PathBuf>,
    }

    impl Fake {
        fn new(dirs: &[&str], files: &[&str]) -> Self {
            let mut f = Fake::default();
            for d in dirs {
                for a in Path::new(d).ancestors() {
                    f.dirs.insert(a.to_path_buf());
                }
            }
            for file in files {
                f.files.insert(PathBuf::from(file));
                for a in Path::new(file).ancestors().skip(1) {
                    f.dirs.insert(a.to_path_buf());
                }
            }
            f
        }
        fn resolve(&self, path: &Path) -> PathBuf {
            let mut out = PathBuf::new();
            for c in path.components() {
                out.push(c);
                if let Some(to) = self.links.get(&out) {
                    out = to.clone();
                }
            }
            out
        }
    }

    impl Disk for Fake {
        fn look(&self, path: &Path) -> Option<(PathBuf, bool)> {
            let real = self.resolve(path);
            if self.dirs.contains(&real) {
                Some((real, true))
            } else {
                self.files.contains(&real).then_some((real, false))
            }
        }
    }

    fn run(disk: &Fake, command: &str, args: &[&str]) -> Grants {
        run_env(disk, command, args, &[])
    }

    fn run_env(disk: &Fake, command: &str, args: &[&str], env: &[(&str, &str)]) -> Grants {
        let place = Place { home: Some("/home/dana".into()), out: "/home/dana/gw".into(), disk };
        let args: Vec<String> = args.iter().map(ToString::to_string).collect();
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        grants(command, &args, &env, &place)
    }

    fn paths(list: &[Why]) -> Vec<&str> {
        list.iter().map(|g| g.what.as_str()).collect()
    }

    fn hosts(g: &Grants) -> Vec<&str> {
        match &g.network {
            Network::Hosts(h) => paths(h),
            other => panic!("an allow-list, not {other:?}"),
        }
    }

    fn parses(g: &Grants) -> toml::Table {
        let text = format!("[servers.x]\ncommand = \"x\"\n{}", g.table("x"));
        text.parse::<toml::Table>().unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    // README of @modelcontextprotocol/server-filesystem (npx).
    #[test]
    fn the_filesystem_servers_directories_are_its_write_and_npm_its_network() {
        let disk = Fake::new(&["/home/dana/Desktop", "/path/to/other/allowed/dir"], &[]);
        let g = run(
            &disk,
            "npx",
            &[
                "-y",
                "@modelcontextprotocol/server-filesystem",
                "/home/dana/Desktop",
                "/path/to/other/allowed/dir",
            ],
        );
        assert_eq!(paths(&g.write), ["/home/dana/Desktop", "/path/to/other/allowed/dir"]);
        assert!(
            g.write
                .iter()
                .all(|w| w.why == "the filesystem server's directories, from its arguments")
        );
        assert!(g.read.is_empty() && g.left_out.is_empty(), "{g:?}");
        assert_eq!(hosts(&g), ["registry.npmjs.org"]);
        let table = parses(&g);
        let sandbox = &table["servers"]["x"]["sandbox"];
        assert_eq!(sandbox["write"].as_array().unwrap().len(), 2);
        assert_eq!(sandbox["network"].as_array().unwrap()[0].as_str(), Some("registry.npmjs.org"));
        assert!(sandbox.get("memory_mb").is_none(), "limits are left to their defaults");

        // `~` is the home; a version after the package is the same package.
        let g = run(
            &disk,
            "npx",
            &["-y", "@modelcontextprotocol/server-filesystem@2025.8.21", "~/Desktop"],
        );
        assert_eq!(paths(&g.write), ["/home/dana/Desktop"]);
        assert_eq!(g.write[0].why, "the filesystem server's directories, from its arguments");
    }

    // The issue's own case: the filesystem server's arguments changed to `/`.
    #[test]
    fn the_whole_disk_the_home_and_the_configs_own_folder_are_never_granted() {
        let disk = Fake::new(&["/home/dana/gw/state/keys", "/home/dana/docs", "/srv"], &[]);
        let g = run(
            &disk,
            "npx",
            &[
                "-y",
                "@modelcontextprotocol/server-filesystem",
                "/",
                "~",
                "/home",
                "/home/dana/gw",
                "/home/dana/gw/state",
                "/home/dana/docs",
            ],
        );
        assert_eq!(paths(&g.write), ["/home/dana/docs"]);
        let left: BTreeMap<&str, &str> =
            g.left_out.iter().map(|n| (n.what.as_str(), n.why.as_str())).collect();
        assert!(left["/"].starts_with("a whole-disk grant is never written"), "{left:?}");
        assert!(left["/home/dana"].starts_with("a whole-home grant is never written"), "{left:?}");
        assert!(
            left["/home"].starts_with("a whole-home grant"),
            "a folder that holds the home is the home: {left:?}"
        );
        assert!(left["/home/dana/gw"].contains("this config's own folder"), "{left:?}");
        assert!(
            left["/home/dana/gw/state"].contains("inside this config's own folder"),
            "{left:?}"
        );
        // A link to the home is the home.
        let mut disk = Fake::new(&["/home/dana"], &[]);
        disk.links.insert("/srv/me".into(), "/home/dana".into());
        let g = run(&disk, "npx", &["-y", "@modelcontextprotocol/server-filesystem", "/srv/me"]);
        assert!(
            g.write.is_empty()
                && g.left_out[0].why.contains("whole-home")
                && g.left_out[0].why.contains("(it is /home/dana)"),
            "{g:?}"
        );
        // Written into the table as a comment, never as a grant.
        let text = g.table("x");
        assert!(text.contains("# Not granted: /srv/me — a whole-home grant is never written; name the folder it needs (it is /home/dana)"), "{text}");
        assert!(parses(&g)["servers"]["x"]["sandbox"].get("write").is_none());
        // A config whose folder is under /tmp: /tmp holds it.
        let disk = Fake::new(&["/tmp/gw"], &[]);
        let place = Place { home: Some("/home/dana".into()), out: "/tmp/gw".into(), disk: &disk };
        let g = grants("my-server", &["--data".into(), "/tmp".into()], &BTreeMap::new(), &place);
        assert!(
            g.write.is_empty() && g.left_out[0].why.contains("holds this config's own folder"),
            "{g:?}"
        );
    }

    // README of @modelcontextprotocol/server-memory and server-everything (npx).
    #[test]
    fn memory_and_everything_get_npm_and_no_path() {
        let disk = Fake::new(&["/home/dana/.claude"], &[]);
        let g = run(&disk, "npx", &["-y", "@modelcontextprotocol/server-memory"]);
        assert!(g.read.is_empty() && g.write.is_empty(), "{g:?}");
        assert_eq!(hosts(&g), ["registry.npmjs.org"]);
        assert!(g.left_out[0].why.contains("the box's own home"), "{g:?}");
        let g = run_env(
            &disk,
            "npx",
            &["-y", "@modelcontextprotocol/server-memory"],
            &[("MEMORY_FILE_PATH", "/home/dana/.claude/memory.jsonl")],
        );
        assert_eq!(paths(&g.write), ["/home/dana/.claude"]);
        assert!(g.write[0].why.contains("MEMORY_FILE_PATH"));
        // A memory file in the home itself would grant the home: refused, said why.
        let g = run_env(
            &disk,
            "npx",
            &["-y", "@modelcontextprotocol/server-memory"],
            &[("MEMORY_FILE_PATH", "/home/dana/memory.jsonl")],
        );
        assert!(g.write.is_empty() && g.left_out[0].why.contains("whole-home"), "{g:?}");

        let g = run(&disk, "npx", &["-y", "@modelcontextprotocol/server-everything"]);
        assert!(g.read.is_empty() && g.write.is_empty() && g.left_out.is_empty(), "{g:?}");
        assert_eq!(hosts(&g), ["registry.npmjs.org"]);
        parses(&g);
    }

    // README of mcp-server-time (uvx).
    #[test]
    fn time_gets_pypi_and_its_timezone_is_no_path() {
        let disk = Fake::new(&["/usr/share/zoneinfo"], &[]);
        for args in [
            &["mcp-server-time"][..],
            &["mcp-server-time", "--local-timezone=America/New_York"],
            &["mcp-server-time", "--local-timezone", "America/New_York"],
        ] {
            let g = run(&disk, "uvx", args);
            assert!(
                g.read.is_empty() && g.write.is_empty() && g.left_out.is_empty(),
                "{args:?}: {g:?}"
            );
            assert_eq!(hosts(&g), ["pypi.org", "files.pythonhosted.org"]);
            assert!(
                matches!(&g.network, Network::Hosts(h) if h[0].why.contains("uvx fetches the package"))
            );
        }
    }

    // README of mcp-server-git (uvx, and `python -m`).
    #[test]
    fn the_git_servers_repository_is_its_write() {
        let disk = Fake::new(&["/home/dana/src/app/.git"], &[]);
        let g = run(&disk, "uvx", &["mcp-server-git", "--repository", "/home/dana/src/app"]);
        assert_eq!(paths(&g.write), ["/home/dana/src/app"]);
        assert_eq!(g.write[0].why, "the git server's repository (--repository)");
        assert_eq!(hosts(&g), ["pypi.org", "files.pythonhosted.org"]);
        let g = run(&disk, "python", &["-m", "mcp_server_git", "--repository=/home/dana/src/app"]);
        assert_eq!(paths(&g.write), ["/home/dana/src/app"]);
        assert!(
            matches!(g.network, Network::None(_)),
            "an installed module fetches nothing: {g:?}"
        );
        // The README's own example is relative: left, with why.
        let g = run(&disk, "uvx", &["mcp-server-git", "--repository", "path/to/git/repo"]);
        assert!(
            g.write.is_empty()
                && g.left_out[0].what == "path/to/git/repo"
                && g.left_out[0].why.contains("write it absolute"),
            "{g:?}"
        );
        let g = run(&disk, "uvx", &["mcp-server-git", "--repository", "."]);
        assert!(g.write.is_empty() && g.left_out[0].what == ".", "{g:?}");
        // A repository not there is not granted (the box refuses a missing path at start).
        let g = run(&disk, "uvx", &["mcp-server-git", "--repository", "/srv/gone"]);
        assert!(g.write.is_empty() && g.left_out[0].why.contains("nothing is there"), "{g:?}");
    }

    // README of @modelcontextprotocol/server-github (npx, with a token in env).
    #[test]
    fn github_adds_its_api_to_the_registry() {
        let g = run_env(
            &Fake::default(),
            "npx",
            &["-y", "@modelcontextprotocol/server-github"],
            &[("GITHUB_PERSONAL_ACCESS_TOKEN", "<YOUR_TOKEN>")],
        );
        assert_eq!(hosts(&g), ["registry.npmjs.org", "api.github.com"]);
        assert!(
            matches!(&g.network, Network::Hosts(h) if h[1].why == "the GitHub server calls GitHub's API")
        );
        parses(&g);
    }

    // README of mcp-server-fetch (uvx, and `python -m`).
    #[test]
    fn fetch_gets_the_whole_network_with_why() {
        for (command, args) in [
            ("uvx", &["mcp-server-fetch"][..]),
            ("uvx", &["mcp-server-fetch", "--ignore-robots-txt"]),
            ("python", &["-m", "mcp_server_fetch"]),
            ("npx", &["-y", "@modelcontextprotocol/server-fetch"]),
        ] {
            let g = run(&Fake::default(), command, args);
            assert!(
                matches!(&g.network, Network::All(why) if why.contains("whatever URL") && why.contains("loopback")),
                "{command} {args:?}: {g:?}"
            );
            assert_eq!(parses(&g)["servers"]["x"]["sandbox"]["network"].as_str(), Some("all"));
        }
    }

    #[test]
    fn launchers_are_read_as_they_read_their_options() {
        let fake = Fake::default();
        // `-p` names the package; the operand is its program.
        let g = run(
            &fake,
            "npx",
            &["--yes", "-p", "@modelcontextprotocol/server-github", "mcp-server-github"],
        );
        assert_eq!(hosts(&g), ["registry.npmjs.org", "api.github.com"]);
        // A registry of one's own replaces npm's.
        let g = run(&fake, "npx", &["--registry=https://npm.example.com/", "-y", "some-server"]);
        assert_eq!(hosts(&g), ["npm.example.com"]);
        assert_eq!(
            hosts(&run(&fake, "/usr/local/bin/bunx", &["some-server"])),
            ["registry.npmjs.org"]
        );
        assert_eq!(hosts(&run(&fake, "pnpm", &["dlx", "some-server"])), ["registry.npmjs.org"]);
        assert_eq!(hosts(&run(&fake, "yarn", &["dlx", "some-server"])), ["registry.yarnpkg.com"]);
        assert_eq!(
            hosts(&run(&fake, "pipx", &["run", "mcp-server-time"])),
            ["pypi.org", "files.pythonhosted.org"]
        );
        assert_eq!(
            hosts(&run(&fake, "uv", &["tool", "run", "mcp-server-time"])),
            ["pypi.org", "files.pythonhosted.org"]
        );
        assert!(matches!(
            run(&fake, "uvx", &["--from", "mcp-server-fetch==2025.1", "mcp-server-fetch"]).network,
            Network::All(_)
        ));
        // A program of its own: no network, and why.
        let g = run(&fake, "/opt/tools/my-server", &["--verbose"]);
        assert!(
            matches!(&g.network, Network::None(why) if why.contains("`my-server` runs as installed")),
            "{g:?}"
        );
        assert_eq!(parses(&g)["servers"]["x"]["sandbox"]["network"].as_str(), Some("none"));
        assert_eq!(package_name("@Scope/Pkg@1.2.3"), "@scope/pkg");
        assert_eq!(package_name("mcp_server_time[extra]>=1"), "mcp-server-time");
    }

    #[test]
    fn other_arguments_that_name_paths_are_granted_by_kind() {
        let disk = Fake::new(
            &["/srv/data", "/home/dana/proj/node_modules"],
            &["/etc/app/config.json", "/home/dana/proj/build/index.js", "/home/dana/loose.py"],
        );
        let g = run(
            &disk,
            "node",
            &[
                "/home/dana/proj/build/index.js",
                "--data",
                "/srv/data",
                "--config=/etc/app/config.json",
                "./rel",
                "https://example.com/x",
                "/srv/missing",
            ],
        );
        assert_eq!(paths(&g.write), ["/srv/data"]);
        assert_eq!(
            g.write[0].why,
            "a folder its arguments name (--data): it may read and write there"
        );
        assert_eq!(paths(&g.read), ["/home/dana/proj", "/etc/app/config.json"]);
        assert!(
            g.read[0].why.contains("the project of the script")
                && g.read[1].why == "a file its arguments name (--config): read only",
            "{g:?}"
        );
        let left: Vec<&str> = paths(&g.left_out);
        assert_eq!(left, ["./rel", "/srv/missing"], "{g:?}");
        // A script with no project above it, below the home: the file alone.
        let g = run(&disk, "python3", &["/home/dana/loose.py"]);
        assert_eq!(paths(&g.read), ["/home/dana/loose.py"]);
        parses(&g);
    }

    // mcp-remote's README: a relay to a remote server.
    #[test]
    fn mcp_remote_reaches_the_server_it_relays_to() {
        let g =
            run(&Fake::default(), "npx", &["-y", "mcp-remote", "https://remote.mcp.server/sse"]);
        assert_eq!(hosts(&g), ["registry.npmjs.org", "remote.mcp.server"]);
        assert!(g.left_out[0].why.contains("OAuth"), "{g:?}");
        let g = run(&Fake::default(), "npx", &["mcp-remote", "http://localhost:8080/mcp"]);
        assert!(
            matches!(&g.network, Network::All(why) if why.contains("http://")),
            "the proxy carries https only: {g:?}"
        );
    }

    #[test]
    fn a_docker_server_is_told_what_the_box_cannot_give_it() {
        let g = run(&Fake::default(), "docker", &["run", "-i", "--rm", "mcp/time"]);
        assert!(g.left_out.iter().any(|n| n.why.contains("sandbox = \"off\"")), "{g:?}");
        parses(&g);
    }

    #[test]
    fn odd_paths_stay_inside_their_strings_and_comments() {
        let disk = Fake::new(&["/srv/a\"b\nc"], &[]);
        let g = run(
            &disk,
            "npx",
            &["-y", "@modelcontextprotocol/server-filesystem", "/srv/a\"b\nc", "/srv/x\ny"],
        );
        let table = parses(&g);
        assert_eq!(table["servers"]["x"]["sandbox"]["write"][0].as_str(), Some("/srv/a\"b\nc"));
        assert!(
            g.lines().iter().any(|l| l.starts_with("write /srv/a\"b\nc: ")),
            "the caller shows each line visibly"
        );
    }
}
