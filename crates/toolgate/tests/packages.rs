//! The packages, built by their scripts and run as a user would run them.
//!
//! - The `.deb` (`scripts/package-deb`, cargo-deb) is installed with dpkg,
//!   its unit checked by `systemd-analyze verify`, and its `ExecStart` run
//!   as its unit would run it: as a user of no account (`DynamicUser`),
//!   writing only its `StateDirectory`. This machine has no systemd running
//!   (a container), so the sandboxing of the unit is not exercised here.
//! - The image (`scripts/package-image`, buildah) is run with podman; its
//!   HEALTHCHECK passes, the official Python SDK calls through it, and its
//!   process is not root.
//!
//! Both package the tests' build of toolgate (`--binary`): the scripts'
//! own static release build is too slow for every run (docs/OPERATIONS.md
//! says what ran where). Both use port 8765, the packages' default, so the
//! two run one at a time (.config/nextest.toml) — and need root, dpkg,
//! buildah and podman, which `scripts/test` installs.

mod demo_common;
mod ops_common;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use demo_common::{python, workspace};
use ops_common::{BIN, spawn_listening};
use serde_json::{Value, json};

/// Runs `cmd`, fails the test with its output if it fails, returns its stdout.
fn run(cmd: &mut StdCommand) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
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

/// The port the packages listen on must be free for them.
fn port_8765_free() {
    assert!(
        std::net::TcpListener::bind("127.0.0.1:8765").is_ok(),
        "127.0.0.1:8765 is taken: the packaged config listens there"
    );
}

/// One Python SDK call of the conformance fixture's text tool through `url`.
fn sdk_calls(url: &str) -> Value {
    let calls = json!([{"tool": "fixture__test_simple_text", "arguments": {}}]);
    let out = run(StdCommand::new(python())
        .arg(workspace().join("tests/python/sdk_client.py"))
        .args([url, "auto", &calls.to_string()]));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["results"][0]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{v}"
    );
    v
}

/// An operator's config: the conformance fixture as a stdio server (the
/// installed binary), read automatically, by an anonymous caller.
fn operator_config(listen: &str) -> String {
    format!(
        "[gateway]\nlisten = \"{listen}\"\nstate_dir = \"/var/lib/toolgate\"\nlock_file = \"/var/lib/toolgate/toolgate.lock\"\n\n\
         [servers.fixture]\ncommand = \"/usr/bin/toolgate\"\nargs = [\"conformance-fixture\", \"--stdio\"]\n\n\
         [registry.\"fixture__test_simple_text\"]\nclass = \"automatic\"\nread_only = true\n\n\
         [callers.agent]\ntenant = \"acme\"\nanonymous = true\n"
    )
}

/// Purges the package however the test ends, and the state it made.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = StdCommand::new("dpkg")
            .args(["--purge", "toolgate"])
            .output();
        let _ = std::fs::remove_dir_all("/var/lib/toolgate");
    }
}

/// The uid the unit's `DynamicUser` would pick: an account nobody has.
const DYNAMIC_UID: u32 = 61_234;

/// The unit's `ExecStart`, run as the unit runs it: as `DYNAMIC_UID`, with
/// no new privileges, its environment file read, in `/`.
fn as_the_unit_runs(exec_start: &str) -> tokio::process::Command {
    let mut words = exec_start.split_whitespace();
    let mut cmd = tokio::process::Command::new("setpriv");
    cmd.args([
        "--reuid",
        &DYNAMIC_UID.to_string(),
        "--regid",
        &DYNAMIC_UID.to_string(),
        "--clear-groups",
        "--no-new-privs",
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
    port_8765_free();
    let deb = run(StdCommand::new(workspace().join("scripts/package-deb")).args(["--binary", BIN]));
    let deb = PathBuf::from(deb.trim());
    assert!(
        deb.extension().is_some_and(|e| e == "deb"),
        "{}",
        deb.display()
    );

    let contents = run(StdCommand::new("dpkg-deb").arg("--contents").arg(&deb));
    let unit = [
        "./usr/lib/systemd/system/toolgate.service",
        "./lib/systemd/system/toolgate.service",
    ]
    .into_iter()
    .find(|u| contents.contains(u))
    .unwrap_or_else(|| panic!("no toolgate.service in the package:\n{contents}"));
    for file in [
        "./usr/bin/toolgate",
        "./etc/toolgate/toolgate.toml",
        "./etc/default/toolgate",
        "./usr/share/doc/toolgate/CONFIG.md",
    ] {
        assert!(
            contents.contains(file),
            "{file} not in the package:\n{contents}"
        );
    }
    let conffiles = run(StdCommand::new("dpkg-deb")
        .arg("--info")
        .arg(&deb)
        .arg("conffiles"));
    assert!(
        conffiles.contains("/etc/toolgate/toolgate.toml")
            && conffiles.contains("/etc/default/toolgate"),
        "{conffiles}"
    );

    let _installed = Installed;
    let _ = std::fs::remove_dir_all("/var/lib/toolgate");
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
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} not in the unit:\n{text}"
        );
    }
    let exec_start = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    assert_eq!(
        exec_start,
        "/usr/bin/toolgate serve --config /etc/toolgate/toolgate.toml"
    );
    run(StdCommand::new("/usr/bin/toolgate").args(["config", "check", "/etc/toolgate/toolgate.toml"]));
    // The secrets file is root's alone; the config is readable by the service.
    let mode = |p: &str| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions())
            & 0o777
    };
    assert_eq!(
        (
            mode("/etc/default/toolgate"),
            mode("/etc/toolgate/toolgate.toml")
        ),
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
    let not_ready = StdCommand::new("/usr/bin/toolgate")
        .arg("probe")
        .output()
        .unwrap();
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
    std::fs::write(
        "/etc/toolgate/toolgate.toml",
        operator_config("127.0.0.1:0"),
    )
    .unwrap();
    let served = spawn_listening(
        as_the_unit_runs(exec_start),
        &dir.path().join("served.log"),
        "toolgate: serving MCP on",
    )
    .await;
    sdk_calls(&served.url);
    let port = served
        .url
        .trim_end_matches("/mcp")
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    run(StdCommand::new("/usr/bin/toolgate")
        .arg("probe")
        .arg(format!("http://127.0.0.1:{port}/readyz")));
    // The pin it took is in its state: it may not write /etc/toolgate.
    let pins = std::fs::read_to_string("/var/lib/toolgate/toolgate.lock")
        .expect("the pins in the state directory");
    assert!(pins.contains("fixture__test_simple_text"), "{pins}");
    assert!(!Path::new("/etc/toolgate/toolgate.lock").exists());
    drop(served);

    run(StdCommand::new("dpkg").args(["--purge", "toolgate"]));
    assert!(
        !Path::new("/usr/bin/toolgate").exists()
            && !Path::new("/etc/toolgate/toolgate.toml").exists(),
        "purged"
    );
}

/// podman with its own storage, in `dir` (removed with everything in it).
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
        Self {
            storage_conf,
            names: Vec::new(),
        }
    }

    fn cmd(&self, program: &str) -> StdCommand {
        let mut cmd = StdCommand::new(program);
        cmd.env("CONTAINERS_STORAGE_CONF", &self.storage_conf);
        cmd
    }

    /// `podman …`, with what this machine needs to run a container: runc
    /// and cgroupfs (crun refuses its hybrid cgroups), limits no higher than
    /// the sandbox's own, and the host's network (no bridge here).
    fn podman(&self) -> StdCommand {
        let mut cmd = self.cmd("podman");
        cmd.args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"]);
        cmd
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = self.podman().args(["rm", "-f", "-t", "0", name]).output();
        }
        // Unmounts the storage's layers, so the folder can go.
        let _ = self.podman().args(["system", "reset", "-f"]).output();
    }
}

#[test]
fn the_image_runs_as_a_user_is_healthy_and_the_python_sdk_calls_through_it() {
    needs(&["buildah", "podman", "runc"]);
    port_8765_free();
    let dir = tempfile::tempdir().unwrap();
    let mut podman = Podman::new(dir.path());
    let archive = dir.path().join("toolgate.tar");
    let image = run(podman
        .cmd(workspace().join("scripts/package-image").to_str().unwrap())
        .args(["--binary", BIN, "--out"])
        .arg(&archive));
    let image = image.trim().to_string();
    assert!(image.starts_with("localhost/toolgate:"), "{image}");
    assert!(
        std::fs::metadata(&archive).unwrap().len() > 1 << 20,
        "the archive holds the image"
    );

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
        json!([
            "CMD",
            "/usr/bin/toolgate",
            "probe",
            "http://127.0.0.1:8765/readyz"
        ]),
        "{}",
        inspect[0]
    );

    // The operator's config over the image's, as its comment says.
    let config_file = dir.path().join("toolgate.toml");
    std::fs::write(&config_file, operator_config("127.0.0.1:8765")).unwrap();
    let name = format!("toolgate-test-{}", std::process::id());
    podman.names.push(name.clone());
    let mut start = podman.podman();
    start.args([
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        "host",
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
        "-v",
    ]);
    start
        .arg(format!(
            "{}:/etc/toolgate/toolgate.toml:ro",
            config_file.display()
        ))
        .arg(&image);
    run(&mut start);

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !podman
        .podman()
        .args(["healthcheck", "run", &name])
        .output()
        .unwrap()
        .status
        .success()
    {
        let logs = podman.podman().args(["logs", &name]).output().unwrap();
        assert!(
            std::time::Instant::now() < deadline,
            "not healthy within 60 s:\n{}",
            String::from_utf8_lossy(&logs.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    sdk_calls("http://127.0.0.1:8765/mcp");

    let pid = run(podman
        .podman()
        .args(["inspect", "--format", "{{.State.Pid}}", &name]));
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
    let code = run(podman
        .podman()
        .args(["inspect", "--format", "{{.State.ExitCode}}", &name]));
    assert_eq!(
        code.trim(),
        "0",
        "{}",
        String::from_utf8_lossy(
            &podman
                .podman()
                .args(["logs", &name])
                .output()
                .unwrap()
                .stderr
        )
    );
}
