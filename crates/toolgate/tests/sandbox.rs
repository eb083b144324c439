//! The box a stdio server runs in (issue 59), proved with a hostile server.
//! `tests/python/hostile_box.py` (the official MCP Python SDK) tries, at its
//! start and again from its tool `probe`, to read the gateway's keys,
//! `requeststate.key`, the secrets, the config, the ledger and `~/.ssh`; to
//! list the state and config directories and the home; to write beside the
//! config, in the state dir and in /tmp, and to link a key into its grant; to
//! connect to a loopback port, a unix socket and an abstract socket the test
//! opened, and to a host not on its list (through the egress proxy: 403, and
//! directly); to fork a hundred processes (32 allowed) and allocate 512 MiB
//! (256 allowed); to signal, ptrace-read and read the environment of the
//! gateway; to keep a descriptor the gateway inherited. Through a real
//! gateway (`toolgate serve`), the stock Python SDK client calls `probe`:
//! nothing was reached, and `echo` still answers; the start-time report the
//! server left in its grant says the same, and the call's receipt names the
//! box. The same server with `sandbox = "off"` reaches the keys: the probe
//! can fail.
//!
//! The tests run as root here and in CI, and the box runs its server as
//! toolgate's own user (in a user namespace of its own), so file modes would
//! not keep it out: what does is the box (Landlock, the namespaces, seccomp,
//! the limits).

mod demo_common;
mod ops_common;
mod sandbox_common;

use std::net::{TcpListener, ToSocketAddrs as _};
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ops_common::{Proc, tail};
use sandbox_common::{client, owner_only, python, python_grants, script, text, toml, toml_list};
use serde_json::{Value, json};

const SECRET: &str = "sk-hostile-own-key-4Qw8Zr2Lp6";
const OTHER_SECRET: &str = "sk-another-servers-key-9Vt3Mx7Kc1";
const CANARY_VAR: &str = "TOOLGATE_SANDBOX_CANARY";
/// A host the registries' machine reaches, not on the hostile server's list.
const BLOCKED_HOST: &str = "registry.npmjs.org";
/// The descriptor the gateway inherits open from its parent (the test).
const INHERITED_FD: i32 = 9;

/// Everything one hostile run needs: the gateway's files, the listeners the
/// server must not reach, and the config boxing it (or not).
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    state: PathBuf,
    config: PathBuf,
    grant: PathBuf,
    fake_home: PathBuf,
    outside_tmp: PathBuf,
    loopback: TcpListener,
    _unix: UnixListener,
    _abstract: UnixListener,
}

impl World {
    fn new(boxed: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let state = root.join("state");
        let secrets = root.join("secrets");
        let grant = root.join("grant");
        // The gateway's home (its HOME), with a key the box must not see.
        let fake_home = root.join("home");
        std::fs::create_dir_all(fake_home.join(".ssh")).unwrap();
        owner_only(
            &fake_home.join(".ssh/id_ed25519"),
            "-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n-----END OPENSSH PRIVATE KEY-----\n",
        );
        std::fs::create_dir(&secrets).unwrap();
        std::fs::create_dir(&grant).unwrap();
        owner_only(&secrets.join("hostile.api-key"), &format!("{SECRET}\n"));
        owner_only(&secrets.join("other.token"), &format!("{OTHER_SECRET}\n"));

        let loopback = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = loopback.local_addr().unwrap().port();
        let unix_path = root.join("gateway-side.sock");
        let unix = UnixListener::bind(&unix_path).unwrap();
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let abstract_name = format!("toolgate-sandbox-test-{}-{nanos}", std::process::id());
        let abstract_ = UnixListener::bind_addr(
            &SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap(),
        )
        .unwrap();
        let outside_tmp =
            PathBuf::from(format!("/tmp/toolgate-hostile-{}-{nanos}", std::process::id()));

        let config = root.join("toolgate.toml");
        let real_home = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
        let mut read: Vec<PathBuf> = [
            "keys/receipt-ed25519.seed",
            "keys/checkpoint-ml-dsa-65.seed",
            "keys/keys.json",
            "requeststate.key",
            "ledger.sqlite3",
        ]
        .iter()
        .map(|f| state.join(f))
        .collect();
        read.extend([
            secrets.join("hostile.api-key"),
            secrets.join("other.token"),
            config.clone(),
            fake_home.join(".ssh/id_ed25519"),
        ]);
        // The real home's own files, when it has them (nothing is read out:
        // only whether a byte could be).
        let ssh = real_home.join(".ssh");
        read.extend(
            std::fs::read_dir(&ssh)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file()),
        );
        read.extend(
            [real_home.join(".profile"), real_home.join(".bashrc")]
                .into_iter()
                .filter(|p| p.is_file()),
        );
        let mut list = vec![
            state.clone(),
            state.join("keys"),
            root.clone(),
            secrets.clone(),
            fake_home.clone(),
            fake_home.join(".ssh"),
            real_home.clone(),
        ];
        if ssh.is_dir() {
            list.push(ssh);
        }
        let mut tcp = vec![json!(["127.0.0.1", port]), json!([BLOCKED_HOST, 443])];
        let mut proxy = vec![
            json!([BLOCKED_HOST, 443]),
            json!(["127.0.0.1", port]),
            json!(["localhost", port]),
            json!(["example.invalid", 22]),
        ];
        // The blocked host by its address too: no name lookup to fail first.
        if let Some(ip) =
            (BLOCKED_HOST, 443).to_socket_addrs().ok().and_then(|mut a| a.find(|a| a.is_ipv4()))
        {
            tcp.push(json!([ip.ip().to_string(), 443]));
            proxy.push(json!([ip.ip().to_string(), 443]));
        }
        let targets = json!({
            "read": read,
            "list": list,
            "write": [root.join("beside-the-config"), outside_tmp, state.join("planted"), state.join("boxes/planted"), "/dev/shm/toolgate-hostile"],
            "open_write": [state.join("ledger.sqlite3"), config, state.join("keys/keys.json")],
            "hardlink": [[state.join("keys/receipt-ed25519.seed"), grant.join("stolen-seed")], [secrets.join("other.token"), grant.join("stolen-token")]],
            "tcp": tcp,
            "proxy": proxy,
            "unix": [unix_path],
            "abstract": [abstract_name],
            "env": [CANARY_VAR],
            "forks": 100,
            "processes": 32,
            "allocate_mb": 512,
            "memory_mb": 256,
            "report": grant.join("start-report.json"),
        });

        let py = python();
        let hostile = script("hostile_box.py");
        let sandbox = if boxed {
            let mut read = vec![hostile.clone(), sandbox_common::venv()];
            read.extend(python_grants());
            format!(
                "\n[servers.hostile.sandbox]\nread = {}\nwrite = {}\nnetwork = [\"example.invalid\"]\nprocesses = 32\nmemory_mb = 256\n",
                toml_list(&read),
                toml_list(std::slice::from_ref(&grant))
            )
        } else {
            "sandbox = \"off\"\n".to_string()
        };
        let text = format!(
            r#"[gateway]
listen = "127.0.0.1:0"
state_dir = "state"
upstream_timeout_ms = 60000

[servers.hostile]
command = {py}
args = [{hostile}, {targets}]
env_file = {{ "HOSTILE_API_KEY" = "secrets/hostile.api-key" }}
{sandbox}
[registry."hostile__probe"]
class = "automatic"
read_only = true
[registry."hostile__echo"]
class = "automatic"
read_only = true

[callers.agent]
tenant = "acme"
anonymous = true
"#,
            py = toml(&py),
            hostile = toml(&hostile),
            targets = json!(targets.to_string()),
        );
        std::fs::write(&config, text).unwrap();
        World {
            _dir: dir,
            root,
            state,
            config,
            grant,
            fake_home,
            outside_tmp,
            loopback,
            _unix: unix,
            _abstract: abstract_,
        }
    }

    /// `toolgate serve`, with HOME its own home, a variable of its own, and a
    /// descriptor it inherits open (fd 9, a file beside the config), as a
    /// gateway started by a careless parent would: the box must get none.
    async fn gateway(&self) -> Proc {
        use std::os::fd::AsRawFd as _;
        let inherited = self.root.join("inherited-by-the-gateway");
        owner_only(&inherited, "a file the gateway's parent left open\n");
        let file = std::fs::File::open(&inherited).unwrap();
        let fd = file.as_raw_fd();
        let mut cmd = tokio::process::Command::new(ops_common::BIN);
        cmd.args(["serve", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "info,toolgate_mcp=debug")
            .env("HOME", &self.fake_home)
            .env(CANARY_VAR, "the gateway's own variable");
        // SAFETY: dup2 is async-signal-safe; the new descriptor has no CLOEXEC.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(fd, INHERITED_FD) < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
        }
        let gateway = ops_common::spawn_listening(
            cmd,
            &self.root.join("gateway.log"),
            "toolgate: serving MCP on",
        )
        .await;
        drop(file);
        gateway
    }

    fn port(&self) -> u16 {
        self.loopback.local_addr().unwrap().port()
    }
}

/// The calls of one run: the probe, then an echo.
fn calls() -> Value {
    json!([{"tool": "hostile__probe", "arguments": {}}, {"tool": "hostile__echo", "arguments": {"text": "still serving"}}])
}

/// The attempt whose name starts with `prefix`.
fn attempt<'a>(report: &'a Value, prefix: &str) -> &'a Value {
    report["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["attempt"].as_str().unwrap().starts_with(prefix))
        .unwrap_or_else(|| panic!("no attempt `{prefix}…` in {report:#}"))
}

fn reached(report: &Value) -> Vec<String> {
    report["reached"]
        .as_array()
        .unwrap_or_else(|| panic!("no `reached` in {report:#}"))
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect()
}

/// An attempt that failed with one of `errnos` (the kernel's word, not a
/// path the test got wrong).
fn refused_with(report: &Value, prefix: &str, errnos: &[&str]) {
    let a = attempt(report, prefix);
    assert_eq!(a["reached"], false, "{a}");
    let errno = a["errno"].as_str().unwrap_or_default();
    assert!(errnos.contains(&errno), "`{prefix}` failed, but not with {errnos:?}: {a}");
}

/// What every report of the boxed server must show.
fn walled_off(report: &Value, w: &World, gateway_pid: u32, when: &str) {
    let pretty = serde_json::to_string_pretty(report).unwrap();
    assert_eq!(report["gateway_pid"], gateway_pid, "the probe aimed at the gateway:\n{pretty}");
    assert_ne!(
        report["home"].as_str(),
        Some(w.fake_home.to_str().unwrap()),
        "the box has its own HOME:\n{pretty}"
    );
    let s = w.state.display();
    // The files exist (the gateway made them before its servers): denied, not missing.
    for f in [
        "keys/receipt-ed25519.seed",
        "keys/checkpoint-ml-dsa-65.seed",
        "keys/keys.json",
        "requeststate.key",
        "ledger.sqlite3",
    ] {
        assert!(w.state.join(f).is_file(), "{s}/{f} exists");
        refused_with(report, &format!("read {s}/{f}"), &["EACCES", "EPERM"]);
    }
    for f in
        ["secrets/hostile.api-key", "secrets/other.token", "toolgate.toml", "home/.ssh/id_ed25519"]
    {
        refused_with(report, &format!("read {}/{f}", w.root.display()), &["EACCES", "EPERM"]);
    }
    refused_with(report, &format!("list {s}"), &["EACCES", "EPERM"]);
    refused_with(report, &format!("list {}", w.root.display()), &["EACCES", "EPERM"]);
    refused_with(
        report,
        &format!("write {}/beside-the-config", w.root.display()),
        &["EACCES", "EPERM"],
    );
    refused_with(report, &format!("write {}", w.outside_tmp.display()), &["EACCES", "EPERM"]);
    refused_with(report, &format!("open for writing {s}/ledger.sqlite3"), &["EACCES", "EPERM"]);
    refused_with(
        report,
        &format!("hardlink {s}/keys/receipt-ed25519.seed"),
        &["EXDEV", "EACCES", "EPERM"],
    );
    // The network: the loopback port is another namespace's; the proxy refuses.
    assert_eq!(attempt(report, &format!("connect 127.0.0.1:{}", w.port()))["reached"], false);
    let refused = attempt(report, &format!("proxy CONNECT {BLOCKED_HOST}:443"));
    assert_eq!(
        refused["detail"]["status"], 403,
        "the egress proxy refuses a host off the list:\n{refused:#}"
    );
    assert!(
        refused["detail"]["body"].as_str().unwrap().contains("servers.hostile.sandbox.network"),
        "the refusal names the line to change:\n{refused:#}"
    );
    for host in ["127.0.0.1", "localhost"] {
        let a = attempt(report, &format!("proxy CONNECT {host}:{}", w.port()));
        assert_eq!(
            a["detail"]["status"], 403,
            "the proxy is no way to the host's loopback:\n{a:#}"
        );
    }
    assert_eq!(
        attempt(report, "proxy CONNECT example.invalid:22")["detail"]["status"],
        403,
        "a host on the list, on a port that is not"
    );
    // Signals, ptrace, the gateway's memory and environment.
    let gw = gateway_pid;
    refused_with(report, &format!("signal 0 to {gw}"), &["EPERM", "ESRCH"]);
    refused_with(report, &format!("SIGCONT to {gw}"), &["EPERM", "ESRCH"]);
    refused_with(report, &format!("process_vm_readv {gw}"), &["EPERM", "ESRCH"]);
    refused_with(report, &format!("read /proc/{gw}/environ"), &["EACCES", "EPERM", "ESRCH"]);
    refused_with(report, "signal 0 to -1", &["EPERM", "ESRCH"]);
    // Processes and memory.
    let forks = attempt(report, "fork 100 processes");
    let forked = forks["detail"]["forked"].as_u64().unwrap_or_else(|| panic!("{forks:#}"));
    assert!(
        forked < 32,
        "at most 32 processes and threads in the box, the server's own included:\n{forks:#}"
    );
    assert!(
        forks["detail"]["errors"].as_array().unwrap().iter().any(|e| e == "EAGAIN"),
        "{forks:#}"
    );
    let memory = attempt(report, "allocate 512 MiB");
    assert!(memory["error"].as_str().unwrap_or_default().starts_with("MemoryError"), "{memory:#}");
    // And every other attempt.
    assert_eq!(
        reached(report),
        Vec::<String>::new(),
        "the hostile server ({when}) reached these:\n{pretty}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_server_in_the_box_reaches_nothing_and_the_gateway_keeps_serving() {
    let started = Instant::now();
    let w = World::new(true);
    let gateway = w.gateway().await;
    let pid = gateway.child.id().unwrap();
    let got = client(&gateway.url, 60, &calls()).await;
    let gateway_log = gateway.log.clone();
    let log = || tail(&gateway_log, 60);
    assert_eq!(
        got["missing"],
        json!([]),
        "the boxed server never listed its tools:\n{got:#}\n{}",
        log()
    );

    // From the tool.
    let probe = &got["results"][0];
    assert_ne!(probe["isError"], true, "{probe:#}\n{}", log());
    // Its receipt names the box it ran in: the profile's hash.
    let hash = probe["_meta"]["io.toolgate/receipt"]["opening"]["logged"]["receipt"]["sandbox"]
        .as_str()
        .unwrap_or_else(|| panic!("the receipt names the sandbox: {:#}", probe["_meta"]));
    assert!(hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()), "{hash}");
    let report = &probe["structuredContent"];
    walled_off(report, &w, pid, "probe");
    // And at its start, before it served: the report it left in its grant.
    let start: Value = serde_json::from_str(
        &std::fs::read_to_string(w.grant.join("start-report.json"))
            .unwrap_or_else(|e| panic!("no start report in the grant ({e}):\n{}", log())),
    )
    .unwrap();
    assert_eq!(start["when"], "start");
    let inherited = attempt(&start, "inherited descriptors");
    assert_eq!(
        inherited["reached"], false,
        "the box inherits no descriptor of the gateway's (fd {INHERITED_FD} is open in the gateway):\n{inherited:#}"
    );
    walled_off(&start, &w, pid, "start");
    assert_eq!(attempt(&start, &format!("gateway variable {CANARY_VAR}"))["reached"], false);

    // The gateway keeps serving.
    assert_eq!(text(&got["results"][1]), "still serving", "{:#}", got["results"][1]);
    let again = client(
        &gateway.url,
        10,
        &json!([{"tool": "hostile__echo", "arguments": {"text": "and again"}}]),
    )
    .await;
    assert_eq!(text(&again["results"][0]), "and again");
    let mut gateway = gateway;
    assert!(gateway.child.try_wait().unwrap().is_none(), "the gateway is still running");

    // Nothing was left behind outside the grant; the refused egress was logged.
    assert!(!w.outside_tmp.exists());
    let planted: Vec<_> = std::fs::read_dir(&w.root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("beside-the-config"))
        .collect();
    assert!(planted.is_empty(), "{planted:?}");
    let grant: Vec<_> = std::fs::read_dir(&w.grant)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(grant, ["start-report.json"], "nothing linked into the grant");
    let line = sandbox_common::log_line(
        &gateway.log,
        &["sandbox", "refused", BLOCKED_HOST],
        Duration::from_secs(5),
    )
    .await;
    assert!(line.is_some(), "the refused CONNECT is logged:\n{}", log());
    eprintln!("the hostile server reached nothing ({:.1} s)", started.elapsed().as_secs_f64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_server_unboxed_reaches_the_keys() {
    let w = World::new(false);
    let gateway = w.gateway().await;
    let pid = gateway.child.id().unwrap();
    let got = client(&gateway.url, 60, &calls()).await;
    assert_eq!(got["missing"], json!([]), "{got:#}\n{}", tail(&gateway.log, 60));
    let report = &got["results"][0]["structuredContent"];
    assert_eq!(
        got["results"][0]["_meta"]["io.toolgate/receipt"]["opening"]["logged"]["receipt"]["sandbox"],
        "off",
        "the receipt says the server ran unboxed"
    );
    let got_to = reached(report);
    let s = w.state.display();
    let r = w.root.display();
    for what in [
        format!("read {s}/keys/receipt-ed25519.seed"),
        format!("read {s}/keys/checkpoint-ml-dsa-65.seed"),
        format!("read {s}/requeststate.key"),
        format!("read {s}/ledger.sqlite3"),
        format!("read {r}/secrets/other.token"),
        format!("read {r}/toolgate.toml"),
        format!("read {r}/home/.ssh/id_ed25519"),
        format!("list {s}"),
        format!("write {r}/beside-the-config"),
        format!("hardlink {s}/keys/receipt-ed25519.seed -> {}/stolen-seed", w.grant.display()),
        format!("connect 127.0.0.1:{}", w.port()),
        format!("connect unix {r}/gateway-side.sock"),
        format!("signal 0 to {pid} (the gateway)"),
        format!("read /proc/{pid}/environ (the gateway)"),
        format!("open the gateway's files through /proc/{pid}/fd"),
        "fork 100 processes (limit 32)".to_string(),
        "allocate 512 MiB (limit 256 MiB)".to_string(),
    ] {
        assert!(
            got_to.contains(&what),
            "unboxed, the probe reaches `{what}`; it reached:\n{got_to:#?}"
        );
    }
    let start: Value =
        serde_json::from_str(&std::fs::read_to_string(w.grant.join("start-report.json")).unwrap())
            .unwrap();
    assert!(reached(&start).contains(&format!("read {s}/keys/receipt-ed25519.seed")), "{start:#}");
    assert_eq!(text(&got["results"][1]), "still serving");
}
