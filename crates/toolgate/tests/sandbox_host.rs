//! Level 3: a host that cannot build a box. toolgate runs in a user
//! namespace whose `user.max_user_namespaces` is 0 (so no box can make
//! one, exactly as on a host with unprivileged user namespaces off): start
//! and `doctor` say what is missing and what isolation is left, a boxed
//! stdio server stays down with the line that would run it unboxed, and a
//! server with `sandbox = "off"` runs, named as unboxed. Never silently.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

fn config(dir: &Path) -> std::path::PathBuf {
    let state = dir.join("atlas");
    std::fs::create_dir_all(&state).unwrap();
    let text = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\n\n\
         [servers.boxed]\ncommand = {bin}\nargs = [\"atlas\", \"tickets\", \"--state\", {state}]\n[servers.boxed.sandbox]\nwrite = [{state}]\n\n\
         [servers.open]\ncommand = {bin}\nargs = [\"atlas\", \"parts\", \"--state\", {state}]\nsandbox = \"off\"\n\n\
         [callers.local]\ntenant = \"local\"\nanonymous = true\n",
        bin = serde_json::json!(BIN),
        state = serde_json::json!(state.display().to_string()),
    );
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `toolgate ARGS` where no user namespace can be made.
fn without_user_namespaces(args: &[&str]) -> Command {
    let mut command = Command::new("unshare");
    command
        .args([
            "--user",
            "--map-root-user",
            "sh",
            "-c",
            "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"",
            "sh",
            BIN,
        ])
        .args(args);
    command
}

fn can_take_user_namespaces_away() -> bool {
    without_user_namespaces(&["--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn doctor_names_what_is_missing_and_the_boxed_server_waits_for_sandbox_off() {
    if !can_take_user_namespaces_away() {
        println!(
            "SKIP: this machine cannot make a user namespace to take user namespaces away in (unshare --user)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path());
    let out =
        without_user_namespaces(&["doctor", "--config", path.to_str().unwrap()]).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    let line = |prefix: &str| {
        text.lines().skip_while(|l| !l.starts_with(prefix)).take(2).collect::<Vec<_>>().join("\n")
    };
    let host = line("FAIL  sandbox:");
    assert!(
        host.contains("cannot build a box")
            && host.contains("user namespace")
            && host.contains("what is left"),
        "{text}"
    );
    assert!(
        host.contains("sandbox = \"off\"") && host.contains("boxed"),
        "the fix names the line and the servers: {text}"
    );
    let boxed = line("FAIL  upstream boxed:");
    assert!(
        boxed.contains("not started unboxed")
            && boxed.contains("sandbox = \"off\"")
            && boxed.contains("[servers.boxed]"),
        "{text}"
    );
    // It runs (its tools are counted; `warn` when the registry's silence hides some of them).
    let open = text
        .lines()
        .find(|l| l.starts_with("ok    upstream open:") || l.starts_with("warn  upstream open:"));
    assert!(
        open.is_some_and(|l| l.contains("protocol")),
        "the server with sandbox = \"off\" runs: {text}"
    );
    assert!(
        text.contains("warn  sandbox open: sandbox = \"off\""),
        "and is named as unboxed: {text}"
    );
}

#[test]
fn serve_warns_at_start_and_runs_only_what_is_written_off() {
    if !can_take_user_namespaces_away() {
        println!(
            "SKIP: this machine cannot make a user namespace to take user namespaces away in (unshare --user)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path());
    let mut child = without_user_namespaces(&["serve", "--config", path.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut warned, mut unboxed, mut down) = (None, None, None);
    while Instant::now() < deadline && (warned.is_none() || unboxed.is_none() || down.is_none()) {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) else { continue };
        if line.contains("upstream down") && line.contains("boxed") {
            down = Some(line);
        } else if line.contains("cannot build a sandbox") && line.contains("user namespace") {
            warned = Some(line);
        } else if line.contains("runs unboxed") && line.contains("open") {
            unboxed = Some(line);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let warned = warned.expect("a WARN at start that names the missing layer");
    assert!(
        warned.contains("WARN")
            && warned.contains("sandbox = \"off\"")
            && warned.contains("servers=[\"boxed\"]"),
        "{warned}"
    );
    assert!(unboxed.expect("the unboxed server is named at start").contains("WARN"));
    let down = down.expect("the boxed server is down, saying why");
    assert!(down.contains("not started unboxed"), "{down}");
}
