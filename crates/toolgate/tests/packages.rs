//! The packages, built by their scripts and run as a user would run them.
//!
//! - The `.deb` (`scripts/package-deb`, cargo-deb) is installed with dpkg,
//!   its unit checked by `systemd-analyze verify`, and its `ExecStart` run
//!   as its unit would run it: as a user of no account (`DynamicUser`),
//!   writing only its `StateDirectory`. This machine has no systemd running
//!   (a container), so the sandboxing of the unit is not exercised here.
//! - The image (`scripts/package-image`, buildah) is run with podman: as
//!   built it is alive but not healthy (no server yet) and refuses everyone;
//!   with an operator's config its HEALTHCHECK passes, the official Python
//!   SDK calls through it, its process is not root, and a stop is graceful.
//!
//! Both package the tests' build of toolgate (`--binary`): the scripts' own
//! release builds are too slow for every run (docs/DEPLOY.md says what ran
//! where). Both use port 8765, the packages' default, so they run one at a
//! time — and need root, dpkg, buildah, podman and runc, which `scripts/test`
//! installs. Neither touches a toolgate this machine has of its own: the
//! `.deb`'s test refuses to run beside one, and the image's keeps its images
//! in a storage of its own.

mod demo_common;
mod ops_common;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::{Duration, Instant};

use demo_common::{python, workspace};
use ops_common::{BIN, spawn_listening};
use serde_json::{Value, json};

/// Runs `cmd`, fails the test with its output if it fails, returns its stdout.
fn run(cmd: &mut StdCommand) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout
}

fn needs(tools: &[&str]) {
    // SAFETY: getuid has no preconditions.
    assert_eq!(
        unsafe { libc::getuid() },
        0,
        "installing packages needs root (scripts/test runs as root in CI)"
    );
    for tool in tools {
        assert!(
            run(StdCommand::new("sh").args(["-c", &format!("command -v {tool} || true")]))
                .trim()
                .len()
                > 1,
            "{tool} is not installed (scripts/test installs it)"
        );
    }
}

/// The port the packages listen on, free for them: one test at a time holds
/// it (nextest runs them one at a time too, each in its own process).
fn port_8765() -> std::sync::MutexGuard<'static, ()> {
    static PORT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let held = PORT.lock().unwrap_or_else(|p| p.into_inner());
    assert!(
        std::net::TcpListener::bind("127.0.0.1:8765").is_ok(),
        "127.0.0.1:8765 is taken: the packaged configs listen there"
    );
    held
}

/// Polls `ok` until it holds, for at most `within`; `what` names it in the failure.
fn eventually(within: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One Python SDK call of the conformance fixture's text tool through `url`.
fn sdk_calls(url: &str) {
    let calls = json!([{"tool": "fixture__test_simple_text", "arguments": {}}]);
    let out = run(StdCommand::new(python())
        .arg(workspace().join("tests/python/sdk_client.py"))
        .args([url, "auto", &calls.to_string()]));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["results"][0]["content"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
}

/// An operator's config: the conformance fixture as a stdio server (the
/// installed binary), read automatically, by an anonymous caller. `extra`
/// goes in the server's table.
fn operator_config(listen: &str, extra: &str) -> String {
    format!(
        "[gateway]\nlisten = \"{listen}\"\nstate_dir = \"/var/lib/toolgate\"\nlock_file = \"/var/lib/toolgate/toolgate.lock\"\n\n\
         [servers.fixture]\ncommand = \"/usr/bin/toolgate\"\nargs = [\"conformance-fixture\", \"--stdio\"]\n{extra}\n\
         [registry.\"fixture__test_simple_text\"]\nclass = \"automatic\"\nread_only = true\n\n\
         [callers.agent]\ntenant = \"acme\"\nanonymous = true\n"
    )
}

/// Purges the package however the test ends, and the state it made.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = StdCommand::new("dpkg").args(["--purge", "toolgate"]).output();
        let _ = std::fs::remove_dir_all("/var/lib/toolgate");
    }
}

/// The uid the unit's `DynamicUser` would pick: an account nobody has.
const DYNAMIC_UID: u32 = 61_234;

/// The unit's `ExecStart`, run as the unit runs it: as `DYNAMIC_UID`, with
/// no new privileges, in `/`, with no environment but `PATH` (the shipped
/// environment file holds only comments). It dies with the test
/// (`--pdeathsig`: the change of uid clears the one spawn_listening sets).
fn as_the_unit_runs(exec_start: &str) -> tokio::process::Command {
    let mut words = exec_start.split_whitespace();
    let id = DYNAMIC_UID.to_string();
    let mut cmd = tokio::process::Command::new("setpriv");
    cmd.args([
        "--reuid",
        &id,
        "--regid",
        &id,
        "--clear-groups",
        "--no-new-privs",
        "--pdeathsig",
        "KILL",
        "--",
    ]);
    cmd.arg(words.next().unwrap())
        .args(words)
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/bin:/bin");
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deb_installs_its_unit_verifies_and_its_service_serves() {
    needs(&["dpkg", "systemd-analyze", "setpriv"]);
    let _port = port_8765();
    // A real installation here is not the test's to replace or purge.
    let installed = StdCommand::new("dpkg").args(["-s", "toolgate"]).output().unwrap();
    assert!(
        !installed.status.success(),
        "toolgate is installed on this machine; the test would replace and purge it"
    );
    assert!(
        !Path::new("/var/lib/toolgate").exists(),
        "/var/lib/toolgate exists; the test would remove it"
    );

    let deb = run(StdCommand::new(workspace().join("scripts/package-deb")).args(["--binary", BIN]));
    let deb = PathBuf::from(deb.trim());
    assert!(deb.extension().is_some_and(|e| e == "deb"), "{}", deb.display());
    let contents = run(StdCommand::new("dpkg-deb").arg("--contents").arg(&deb));
    let unit =
        ["./usr/lib/systemd/system/toolgate.service", "./lib/systemd/system/toolgate.service"]
            .into_iter()
            .find(|u| contents.contains(u))
            .unwrap_or_else(|| panic!("no toolgate.service in the package:\n{contents}"));
    for file in [
        "./usr/bin/toolgate",
        "./etc/toolgate/toolgate.toml",
        "./etc/default/toolgate",
        "./usr/share/doc/toolgate/DEPLOY.md",
    ] {
        assert!(contents.contains(file), "{file} not in the package:\n{contents}");
    }
    let conffiles = run(StdCommand::new("dpkg-deb").arg("--info").arg(&deb).arg("conffiles"));
    assert!(
        conffiles.contains("/etc/toolgate/toolgate.toml")
            && conffiles.contains("/etc/default/toolgate"),
        "{conffiles}"
    );

    let _installed = Installed;
    run(StdCommand::new("dpkg").arg("-i").arg(&deb));
    let unit = Path::new(&unit[1..]);
    run(StdCommand::new("systemd-analyze").arg("verify").arg(unit));
    let text = std::fs::read_to_string(unit).unwrap();
    for line in [
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "StateDirectory=toolgate",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "KillMode=mixed",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in the unit:\n{text}");
    }
    let exec_start = text.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("ExecStart");
    assert_eq!(exec_start, "/usr/bin/toolgate serve --config /etc/toolgate/toolgate.toml");
    run(StdCommand::new("/usr/bin/toolgate").args([
        "config",
        "check",
        "/etc/toolgate/toolgate.toml",
    ]));
    // The secrets file is root's alone; the config is readable by the service.
    let mode = |p: &str| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions())
            & 0o777
    };
    assert_eq!(
        (mode("/etc/default/toolgate"), mode("/etc/toolgate/toolgate.toml")),
        (0o600, 0o644)
    );

    // systemd's StateDirectory: made for the service's user, owner-only.
    std::fs::create_dir_all("/var/lib/toolgate").unwrap();
    std::os::unix::fs::chown("/var/lib/toolgate", Some(DYNAMIC_UID), Some(DYNAMIC_UID)).unwrap();
    std::fs::set_permissions(
        "/var/lib/toolgate",
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();

    // As installed: it serves on 127.0.0.1:8765 and is alive, but not ready
    // (no server yet), and refuses everyone until a caller is named.
    let dir = tempfile::tempdir().unwrap();
    let shipped = spawn_listening(
        as_the_unit_runs(exec_start),
        &dir.path().join("shipped.log"),
        "toolgate: serving MCP on",
    )
    .await;
    assert_eq!(shipped.url, "http://127.0.0.1:8765/mcp");
    run(StdCommand::new("/usr/bin/toolgate").args(["probe", "http://127.0.0.1:8765/healthz"]));
    let not_ready = StdCommand::new("/usr/bin/toolgate").arg("probe").output().unwrap();
    let said = String::from_utf8_lossy(&not_ready.stderr);
    assert!(
        !not_ready.status.success() && said.contains("answered 503") && said.contains("not_ready"),
        "{said}"
    );
    let refused = reqwest::Client::new()
        .post(&shipped.url)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let ledger = std::fs::metadata("/var/lib/toolgate/ledger.sqlite3")
        .expect("the ledger in the state directory");
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&ledger), DYNAMIC_UID);
    drop(shipped);

    // The operator names a server and a caller; the Python SDK calls through.
    std::fs::write("/etc/toolgate/toolgate.toml", operator_config("127.0.0.1:0", "")).unwrap();
    let served = spawn_listening(
        as_the_unit_runs(exec_start),
        &dir.path().join("served.log"),
        "toolgate: serving MCP on",
    )
    .await;
    sdk_calls(&served.url);
    run(StdCommand::new("/usr/bin/toolgate")
        .arg("probe")
        .arg(served.url.replace("/mcp", "/readyz")));
    // The pin it took is in its state (`lock_file`): it may not write /etc/toolgate.
    let pins = std::fs::read_to_string("/var/lib/toolgate/toolgate.lock")
        .expect("the pins in the state directory");
    assert!(pins.contains("fixture__test_simple_text"), "{pins}");
    drop(served);

    run(StdCommand::new("dpkg").args(["--purge", "toolgate"]));
    assert!(
        !Path::new("/usr/bin/toolgate").exists()
            && !Path::new("/etc/toolgate/toolgate.toml").exists(),
        "purged"
    );
}

/// podman with a storage of its own, in `dir`.
struct Podman {
    storage_conf: PathBuf,
    names: Vec<String>,
}

impl Podman {
    fn new(dir: &Path) -> Self {
        let storage_conf = dir.join("storage.conf");
        let conf = format!(
            "[storage]\ndriver = \"overlay\"\ngraphroot = \"{0}/graph\"\nrunroot = \"{0}/run\"\n",
            dir.display()
        );
        std::fs::write(&storage_conf, conf).unwrap();
        Self { storage_conf, names: Vec::new() }
    }

    fn cmd(&self, program: &str) -> StdCommand {
        let mut cmd = StdCommand::new(program);
        cmd.env("CONTAINERS_STORAGE_CONF", &self.storage_conf);
        cmd
    }

    /// `podman …` as this machine can run a container: runc and cgroupfs
    /// (crun refuses its hybrid cgroups).
    fn podman(&self) -> StdCommand {
        let mut cmd = self.cmd("podman");
        cmd.args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"]);
        cmd
    }

    /// Starts `image` as `name` (with `extra` arguments): the host's network
    /// (no bridge here), limits no higher than the sandbox's own.
    fn start(&mut self, name: &str, image: &str, extra: &[&str]) {
        self.names.push(name.to_string());
        let mut cmd = self.podman();
        cmd.args([
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "host",
            "--ulimit",
            "nofile=4096:4096",
            "--ulimit",
            "nproc=4096:4096",
        ]);
        run(cmd.args(extra).arg(image));
    }

    fn logs(&self, name: &str) -> String {
        String::from_utf8_lossy(&self.podman().args(["logs", name]).output().unwrap().stderr)
            .into_owned()
    }
}

impl Drop for Podman {
    /// Its containers and images go, and with them every mount in its
    /// storage (not `podman system reset`: that also clears the machine's
    /// own networks and podman's temporary folder).
    fn drop(&mut self) {
        for name in &self.names {
            let _ = self.podman().args(["rm", "-f", "-v", "-t", "0", name]).output();
        }
        let _ = self.podman().args(["rmi", "-a", "-f"]).output();
    }
}

#[test]
fn the_image_runs_as_a_user_is_healthy_and_the_python_sdk_calls_through_it() {
    needs(&["buildah", "podman", "runc"]);
    let _port = port_8765();
    let dir = tempfile::tempdir().unwrap();
    let mut podman = Podman::new(dir.path());
    let archive = dir.path().join("toolgate.tar");
    let image = run(podman
        .cmd(workspace().join("scripts/package-image").to_str().unwrap())
        .args(["--binary", BIN, "--out"])
        .arg(&archive));
    let image = image.trim().to_string();
    assert!(image.starts_with("localhost/toolgate:"), "{image}");
    assert!(std::fs::metadata(&archive).unwrap().len() > 1 << 20, "the archive holds the image");

    let inspect: Value =
        serde_json::from_str(&run(podman.podman().args(["image", "inspect", &image]))).unwrap();
    let config = &inspect[0]["Config"];
    assert_eq!(config["User"], "65532:65532", "{config}");
    assert_eq!(config["Entrypoint"], json!(["/usr/bin/toolgate"]));
    assert!(
        config["ExposedPorts"]
            .as_object()
            .is_some_and(|p| p.keys().any(|k| k.split('/').next() == Some("8765"))),
        "{config}"
    );
    let health = &inspect[0]["Healthcheck"];
    assert_eq!(
        health["Test"],
        json!(["CMD", "/usr/bin/toolgate", "probe", "http://127.0.0.1:8765/readyz"]),
        "{}",
        inspect[0]
    );

    // As built: its own config serves on every interface, alive but not
    // healthy (no server yet), refusing everyone until a caller is named.
    let shipped = format!("toolgate-shipped-{}", std::process::id());
    podman.start(&shipped, &image, &[]);
    eventually(Duration::from_secs(30), "the image's gateway alive", || {
        podman
            .podman()
            .args(["exec", &shipped, "/usr/bin/toolgate", "probe", "http://127.0.0.1:8765/healthz"])
            .output()
            .unwrap()
            .status
            .success()
    });
    assert!(
        !podman.podman().args(["healthcheck", "run", &shipped]).output().unwrap().status.success(),
        "healthy with no server"
    );
    let refused = run(StdCommand::new("curl").args([
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-X",
        "POST",
        "http://127.0.0.1:8765/mcp",
    ]));
    assert_eq!(refused, "401", "no caller is named: refused");
    run(podman.podman().args(["rm", "-f", "-v", "-t", "5", &shipped]));

    // The operator's config over the image's, as its comment says.
    let config_file = dir.path().join("toolgate.toml");
    // A container is the box: the engine's seccomp profile refuses the
    // user namespace a box needs, so the server is run unboxed, by name
    // (DEPLOY.md). The .deb's unit above boxes it.
    std::fs::write(&config_file, operator_config("127.0.0.1:8765", "sandbox = \"off\"\n")).unwrap();
    let name = format!("toolgate-test-{}", std::process::id());
    podman.start(
        &name,
        &image,
        &["-v", &format!("{}:/etc/toolgate/toolgate.toml:ro", config_file.display())],
    );
    eventually(Duration::from_secs(60), "healthy", || {
        podman.podman().args(["healthcheck", "run", &name]).output().unwrap().status.success()
    });
    sdk_calls("http://127.0.0.1:8765/mcp");

    let pid = run(podman.podman().args(["inspect", "--format", "{{.State.Pid}}", &name]));
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim())).unwrap();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(uid, "65532", "the gateway's process is not root");

    // SIGTERM: a graceful stop, exit 0.
    run(podman.podman().args(["stop", "-t", "30", &name]));
    let code = run(podman.podman().args(["inspect", "--format", "{{.State.ExitCode}}", &name]));
    assert_eq!(code.trim(), "0", "{}", podman.logs(&name));
}
