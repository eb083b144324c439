//! Issue 60's acceptance: real servers from the registries, as a new user
//! puts them behind toolgate. A Claude Desktop config names five servers as
//! their READMEs show them — `@modelcontextprotocol/server-filesystem`,
//! `server-memory` and `server-everything` by `npx -y`, `mcp-server-time`
//! and `mcp-server-git` by `uvx` —; `toolgate import` turns it into a
//! config (each server boxed, its registry's hosts on its list; its tools
//! classed), `toolgate serve` serves it, and the stock Python SDK
//! (`tests/python/registries_client.py`: `Client(url)`, `call_tool`)
//! lists every server's tools, reads real content, makes a write that waits
//! until the approver (`me`, another person than the agent) approves it from
//! the CLI — and then has happened —, and one the approver denies, which is
//! refused and has not happened; `toolgate verify --answer` then proves the
//! saved answer of a read from the gateway's published log.
//!
//! Each box starts with an empty cache (its home is in the imported
//! config's state dir), so the import fetches every package: 10-60 s. The
//! serve after it starts from the caches the import filled. When npm or
//! PyPI cannot be reached from this machine, the test says so in one line
//! and does nothing else. `uvx` is the one `scripts/test` puts in
//! `.venv-sdk` (tests/python/requirements.txt), found on PATH as a user's
//! would be; `npx` is Node's.
//!
//! A server that fails at start is not waited for by the import, which
//! prints its reason: `import.rs`
//! (`a_server_that_fails_at_start_is_not_waited_for_and_says_why`).

mod demo_common;
mod ops_common;
mod sandbox_common;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::{Duration, Instant};

use ops_common::{BIN, tail};
use sandbox_common::{python, reachable, script, skip, start_gateway, venv};
use serde_json::{Value, json};
use tokio::process::Command;

const NPM: &str = "https://registry.npmjs.org/@modelcontextprotocol%2fserver-memory";
const PYPI: &str = "https://pypi.org/simple/mcp-server-time/";
const SERVERS: [&str; 5] = ["filesystem", "memory", "everything", "time", "git"];
/// The most the import of the five may take, fetching every package into
/// fresh box homes (it gives each server 30 s to start).
const IMPORT_S: u64 = 90;
/// How long the served upstreams get to be ready (their caches are warm).
const READY_S: u64 = 120;
/// How long the approver lets a held call wait before deciding.
const DELIBERATE: Duration = Duration::from_millis(1500);

/// `PATH` with the venv's `bin` (where `uvx` is) first, as a user who
/// installed uv has it.
fn path_with_uvx() -> String {
    format!("{}:{}", venv().join("bin").display(), std::env::var("PATH").unwrap_or_default())
}

/// A git repository with one commit, for `mcp-server-git`.
fn repository(dir: &Path) {
    std::fs::create_dir(dir).unwrap();
    std::fs::write(dir.join("README"), "imported\n").unwrap();
    let git = |args: &[&str]| {
        let out = StdCommand::new("git")
            .args([
                "-c",
                "user.name=toolgate",
                "-c",
                "user.email=toolgate@localhost",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git is installed");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    git(&["init", "-q"]);
    git(&["add", "README"]);
    git(&["commit", "-q", "-m", "a commit made before the import"]);
}

/// `toolgate ARGS…` to its end: (success, stdout, stderr).
async fn toolgate(args: &[&str], config: &Path) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(config)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until `/readyz` names every one of `servers` ready; the last answer.
async fn ready(base: &str, servers: &[&str], within: Duration) -> Result<Value, Value> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + within;
    let mut last = Value::Null;
    loop {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await {
            last = r.json().await.unwrap_or(Value::Null);
            if servers.iter().all(|s| last["upstreams"][*s] == "ready") {
                return Ok(last);
            }
        }
        if Instant::now() > deadline {
            return Err(last);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What the approver did with one held call.
#[derive(Debug)]
struct Decided {
    id: String,
    /// Whether the write's file was there after its call had waited
    /// `DELIBERATE` (it must not be).
    file_while_waiting: bool,
    /// What `approvals approve --as local` (the agent's own caller) said.
    agent_tried: (bool, String),
}

/// The approver, another person than the agent: lists the pending
/// approvals from the CLI until one for `tool` writing `path` waits, checks
/// that nothing was written meanwhile, lets it wait `DELIBERATE`, and
/// decides it (`approve` or `deny`) as `me`.
async fn decide(
    config: PathBuf,
    tool: &'static str,
    path: PathBuf,
    verdict: &'static str,
) -> Result<Decided, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let wanted = path.display().to_string();
    loop {
        let (ok, stdout, stderr) =
            toolgate(&["approvals", "list", "--state", "pending", "--json"], &config).await;
        if !ok {
            return Err(format!("approvals list: {stdout}{stderr}"));
        }
        let list: Value =
            serde_json::from_str(&stdout).map_err(|e| format!("approvals list: {e}: {stdout}"))?;
        let ours = list["approvals"].as_array().into_iter().flatten().find(|a| {
            format!("{}__{}", a["server"].as_str().unwrap_or(""), a["tool"].as_str().unwrap_or(""))
                == tool
                && a["arguments"]["path"] == wanted.as_str()
        });
        if let Some(id) = ours.and_then(|a| a["id"].as_str()) {
            tokio::time::sleep(DELIBERATE).await;
            let file_while_waiting = path.exists();
            // The agent's own caller may not decide: it is no approver.
            let (refused_ok, out, err) = toolgate(
                &["approvals", verdict, id, "--as", "local", "--reason", "my own call"],
                &config,
            )
            .await;
            let (ok, stdout, stderr) = toolgate(
                &[
                    "approvals",
                    verdict,
                    id,
                    "--as",
                    "me",
                    "--reason",
                    "the acceptance test's approver",
                ],
                &config,
            )
            .await;
            if !ok {
                return Err(format!("approvals {verdict} {id} --as me: {stdout}{stderr}"));
            }
            return Ok(Decided {
                id: id.to_string(),
                file_while_waiting,
                agent_tried: (refused_ok, out + &err),
            });
        }
        if Instant::now() > deadline {
            return Err(format!("no pending approval for {tool} {wanted} within 60 s: {list}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// When each server came up (or went down) during the import, in seconds
/// from its first log line: `time up 8.1 s, …`.
fn timeline(stderr: &str) -> String {
    // `2026-12-06T13:57:31.592283Z …` → seconds of the day.
    let clock = |line: &str| -> Option<f64> {
        let t = line.get(11..26)?;
        let (h, m, s) = (
            t.get(0..2)?.parse::<f64>().ok()?,
            t.get(3..5)?.parse::<f64>().ok()?,
            t.get(6..)?.parse::<f64>().ok()?,
        );
        Some(h * 3600.0 + m * 60.0 + s)
    };
    let Some(start) = stderr.lines().find_map(clock) else { return "no log".into() };
    let events: Vec<String> = stderr
        .lines()
        .filter_map(|l| {
            let state = if l.contains("upstream up ") {
                "up"
            } else if l.contains("upstream down ") {
                "down"
            } else {
                return None;
            };
            let server = l.split("server=").nth(1)?.split_whitespace().next()?;
            Some(format!("{server} {state} {:.1} s", (clock(l)? - start).rem_euclid(86400.0)))
        })
        .collect();
    events.join(", ")
}

/// Today's date in UTC, `YYYY-MM-DD`.
fn today_utc() -> String {
    let out = StdCommand::new("date").args(["-u", "+%F"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The text of a tool result's first content block.
fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text content: {result}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_servers_from_the_registries_are_imported_served_and_governed() {
    const TEST: &str =
        "registries_import::five_servers_from_the_registries_are_imported_served_and_governed";
    for (registry, url) in [("the npm registry", NPM), ("PyPI", PYPI)] {
        if let Err(why) = reachable(url) {
            return skip(
                TEST,
                &format!("{registry} cannot be reached from this machine ({url}: {why})"),
            );
        }
    }
    let uvx = venv().join("bin/uvx");
    assert!(
        uvx.exists(),
        "no {}: run scripts/test (tests/python/requirements.txt installs uv)",
        uvx.display()
    );
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let files = root.join("files");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("notes.txt"), "written before the import, read through toolgate")
        .unwrap();
    let repo = root.join("repo");
    repository(&repo);

    // 1. The Claude Desktop config, each entry as its server's README shows it.
    let claude = root.join("claude_desktop_config.json");
    let config_json = json!({"mcpServers": {
        "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", files]},
        "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
        "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"]},
        "time": {"command": "uvx", "args": ["mcp-server-time"]},
        "git": {"command": "uvx", "args": ["mcp-server-git", "--repository", repo]},
    }});
    std::fs::write(&claude, serde_json::to_string_pretty(&config_json).unwrap()).unwrap();

    // 2. `toolgate import`: every server started once, classed, boxed.
    let out = root.join("gw");
    let import_started = Instant::now();
    let imported = tokio::time::timeout(
        Duration::from_secs(IMPORT_S),
        Command::new(BIN)
            .arg("import")
            .arg(&claude)
            .arg("--out")
            .arg(&out)
            .args(["--listen", "127.0.0.1:0"])
            .env("PATH", path_with_uvx())
            .env("RUST_LOG", "info")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("the import of five servers did not finish within {IMPORT_S} s"))
    .unwrap();
    let import_took = import_started.elapsed();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&imported.stdout), String::from_utf8_lossy(&imported.stderr));
    eprintln!(
        "registries_import: the import of the five took {:.1} s (fresh box homes: every package fetched): {}",
        import_took.as_secs_f64(),
        timeline(&stderr)
    );
    // Its warnings (a server down, and why); the rest is each connection its boxes made.
    let warnings: String = stderr
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(imported.status.success(), "import:\n{stdout}\n{stderr}");
    assert!(
        stdout
            .contains(&format!("toolgate: 5 servers into {}", out.join("toolgate.toml").display())),
        "{stdout}"
    );
    for server in SERVERS {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("  {server} (from ")))
            .unwrap_or_else(|| panic!("the import names {server}:\n{stdout}"));
        assert!(
            line.contains("tools classed") && !line.contains("did not start"),
            "the import started {server} and classed its tools: {line}\n\n{stdout}\n{warnings}"
        );
    }
    let config_path = out.join("toolgate.toml");
    let config_text = std::fs::read_to_string(&config_path).unwrap();
    let config: toml::Table = config_text.parse().unwrap();
    let strings = |v: Option<&toml::Value>| {
        v.and_then(toml::Value::as_array)
            .map(|a| {
                a.iter().filter_map(toml::Value::as_str).map(str::to_string).collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    // Each in a box whose network is its launcher's registry; the
    // filesystem server writes its directory, the git server its repository.
    for server in SERVERS {
        let sandbox = &config["servers"][server]["sandbox"];
        let hosts = strings(sandbox.get("network"));
        let registry: &[&str] = if matches!(server, "time" | "git") {
            &["pypi.org", "files.pythonhosted.org"]
        } else {
            &["registry.npmjs.org"]
        };
        assert_eq!(hosts, registry, "{server}'s box reaches its registry only:\n{config_text}");
    }
    assert_eq!(
        strings(config["servers"]["filesystem"]["sandbox"].get("write")),
        [files.display().to_string()],
        "{config_text}"
    );
    assert_eq!(
        strings(config["servers"]["git"]["sandbox"].get("write")),
        [repo.display().to_string()],
        "{config_text}"
    );
    // The tools the agent uses below, classed as the import wrote them.
    let class = |tool: &str| {
        config["registry"]
            .get(tool)
            .and_then(|e| e.get("class"))
            .and_then(toml::Value::as_str)
            .map(str::to_string)
    };
    for read in [
        "filesystem__read_text_file",
        "memory__read_graph",
        "everything__echo",
        "time__get_current_time",
        "git__git_status",
        "git__git_log",
    ] {
        assert_eq!(class(read).as_deref(), Some("automatic"), "{read}:\n{config_text}");
    }
    assert_eq!(
        class("filesystem__write_file").as_deref(),
        Some("requires_approval"),
        "{config_text}"
    );

    // 3. `toolgate serve` with the written config.
    let log = root.join("gateway.log");
    let path = path_with_uvx();
    let serve_started = Instant::now();
    let gateway = start_gateway(&config_path, &log, &[("PATH", path.as_str())]).await;
    let readyz = ready(&gateway.base(), &SERVERS, Duration::from_secs(READY_S))
        .await
        .unwrap_or_else(|last| {
            panic!("not every upstream was ready within {READY_S} s: {last}\n{}", tail(&log, 60))
        });
    let ready_after = serve_started.elapsed();

    // 4. The agent: the stock Python SDK. Its writes wait for the approver,
    // who decides from the CLI meanwhile.
    let held = files.join("held.txt");
    let denied = files.join("denied.txt");
    let answer = root.join("read-answer");
    let calls = json!([
        {"tool": "filesystem__read_text_file", "arguments": {"path": files.join("notes.txt")}, "save": answer},
        {"tool": "time__get_current_time", "arguments": {"timezone": "UTC"}},
        {"tool": "git__git_status", "arguments": {"repo_path": repo}},
        {"tool": "git__git_log", "arguments": {"repo_path": repo}},
        {"tool": "memory__read_graph", "arguments": {}},
        {"tool": "everything__echo", "arguments": {"message": "through toolgate"}},
        {"tool": "filesystem__write_file", "arguments": {"path": held, "content": "approved by me"}},
        {"tool": "filesystem__write_file", "arguments": {"path": denied, "content": "never written"}},
    ]);
    let approver = {
        let (config, held, denied) = (config_path.clone(), held.clone(), denied.clone());
        tokio::spawn(async move {
            let approved =
                decide(config.clone(), "filesystem__write_file", held, "approve").await?;
            let refused = decide(config, "filesystem__write_file", denied, "deny").await?;
            Ok::<_, String>((approved, refused))
        })
    };
    let today_before = today_utc();
    let mut agent = Command::new(python());
    agent
        .arg(script("registries_client.py"))
        .args([gateway.url.as_str(), &calls.to_string()])
        .kill_on_drop(true);
    let run = tokio::time::timeout(Duration::from_secs(180), agent.output())
        .await
        .expect("the agent finished")
        .unwrap();
    let got = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "registries_client.py: {got}\n{}\n{}",
        String::from_utf8_lossy(&run.stderr),
        tail(&log, 40)
    );
    let got: Value = serde_json::from_str(&got)
        .unwrap_or_else(|e| panic!("registries_client.py: not JSON ({e}): {got}"));
    let (approved, refused) = approver
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the approver: {e}\n{got:#}\n{}", tail(&log, 40)));

    // Every server's tools are listed, under SERVER__TOOL.
    let tools: Vec<&str> =
        got["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for server in SERVERS {
        assert!(
            tools.iter().any(|t| t.starts_with(&format!("{server}__"))),
            "{server}'s tools are listed: {tools:?}"
        );
    }
    assert!(
        tools.iter().all(|t| SERVERS
            .iter()
            .any(|s| t.strip_prefix(s).is_some_and(|rest| rest.starts_with("__")))),
        "{tools:?}"
    );
    for tool in [
        "filesystem__read_text_file",
        "filesystem__write_file",
        "memory__read_graph",
        "memory__create_entities",
        "everything__echo",
        "time__get_current_time",
        "time__convert_time",
        "git__git_status",
        "git__git_log",
    ] {
        assert!(tools.contains(&tool), "{tool} is listed: {tools:?}");
    }

    let results = got["results"].as_array().unwrap();
    assert_eq!(results.len(), 8, "{got:#}");
    let ok = |i: usize, what: &str| -> &Value {
        let r = &results[i]["result"];
        assert!(
            r.get("content").is_some() && r["isError"] != true,
            "{what}: {:#}\n{}",
            results[i],
            tail(&log, 40)
        );
        r
    };
    // Reads return the real content.
    assert_eq!(text(ok(0, "read the file")), "written before the import, read through toolgate");
    let now: Value = serde_json::from_str(text(ok(1, "the time")))
        .unwrap_or_else(|e| panic!("the time is JSON ({e}): {}", results[1]));
    assert_eq!(now["timezone"], "UTC", "{now}");
    // Today's date here, the day the agent started or (past midnight) ended.
    let today = [today_before.as_str(), today_utc().as_str()].map(str::to_string);
    assert!(
        now["datetime"]
            .as_str()
            .is_some_and(|d| today.iter().any(|t| d.starts_with(&format!("{t}T")))),
        "the server's clock is this machine's: {now} vs {today:?}"
    );
    assert!(text(ok(2, "git status")).contains("On branch main"), "{}", results[2]);
    assert!(text(ok(3, "git log")).contains("a commit made before the import"), "{}", results[3]);
    let graph: Value = serde_json::from_str(text(ok(4, "the memory graph")))
        .unwrap_or_else(|e| panic!("the graph is JSON ({e}): {}", results[4]));
    assert!(graph["entities"].is_array() && graph["relations"].is_array(), "{graph}");
    assert!(text(ok(5, "echo")).contains("through toolgate"), "{}", results[5]);

    // The approved write waited for the approver, then ran, once.
    assert!(!approved.file_while_waiting, "nothing was written while the call waited");
    assert!(
        !approved.agent_tried.0
            && approved.agent_tried.1.contains("`local` does not have the `approver` role"),
        "the agent's own caller may not approve: {}",
        approved.agent_tried.1
    );
    let written = ok(6, "the approved write");
    let took = results[6]["took_s"].as_f64().unwrap();
    assert!(took >= DELIBERATE.as_secs_f64(), "the write waited for the approver: {took} s");
    assert!(took < 30.0, "approved within the hold, answered then: {took} s");
    assert!(!text(written).is_empty(), "{written}");
    assert_eq!(std::fs::read_to_string(&held).unwrap(), "approved by me", "its effect is real");

    // The denied one was refused, clearly, and did not happen.
    assert!(
        !refused.file_while_waiting
            && !refused.agent_tried.0
            && refused.agent_tried.1.contains("`local` does not have the `approver` role"),
        "{refused:?}"
    );
    let no = &results[7]["result"];
    assert_eq!(no["isError"], true, "{:#}", results[7]);
    assert_eq!(no["structuredContent"]["reason"], "approval_denied", "{no:#}");
    assert_eq!(no["structuredContent"]["action"], "refused", "{no:#}");
    assert!(
        text(no).contains("filesystem__write_file"),
        "the refusal names the tool: {}",
        text(no)
    );
    assert!(!denied.exists(), "the denied write did not happen");

    // The ledger says who decided.
    let (_, listed, _) = toolgate(&["approvals", "list", "--json"], &config_path).await;
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let state = |id: &str| {
        listed["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == id)
            .map(|a| (a["state"].clone(), a["decided_by"].clone()))
    };
    assert_eq!(state(&approved.id), Some((json!("consumed"), json!("me"))), "{listed:#}");
    assert_eq!(state(&refused.id), Some((json!("denied"), json!("me"))), "{listed:#}");

    // 5. The read's saved answer proves from the gateway's published log,
    // saved the plain way and with exclude_none.
    let (ok_keys, keys, keys_err) = toolgate(&["keys", "show"], &config_path).await;
    assert!(ok_keys, "{keys}{keys_err}");
    let vkeys: Vec<&str> = keys.lines().filter_map(|l| l.strip_prefix("vkey     ")).collect();
    assert!(!vkeys.is_empty(), "{keys}");
    // The log is served to approvers: the token import wrote for `me`.
    let approver_token = std::fs::read_to_string(out.join("approver.token")).unwrap();
    let log_url = format!("{}/log/", gateway.base());
    let verify = |saved: &Path| {
        let mut cmd = Command::new(BIN);
        cmd.args(["verify", "--answer"]).arg(saved).args(["--log", &log_url]);
        for k in &vkeys {
            cmd.args(["--vkey", k]);
        }
        cmd.env("TOOLGATE_LOG_TOKEN", approver_token.trim()).kill_on_drop(true);
        async move { cmd.output().await }
    };
    let mut verified = Vec::new();
    for form in ["plain", "exclude_none"] {
        let saved = PathBuf::from(format!("{}.{form}.json", answer.display()));
        let v = verify(&saved).await.unwrap();
        let stdout = String::from_utf8_lossy(&v.stdout);
        // The whole answer proven, not only its receipt.
        let passed = v.status.success()
            && stdout.lines().any(|l| l.starts_with("ok   answer"))
            && stdout.ends_with("verified\n");
        let said = format!("{stdout}{}", String::from_utf8_lossy(&v.stderr));
        verified.push((form, passed, said, std::fs::read_to_string(&saved).unwrap_or_default()));
    }
    for (form, passed, said, saved) in &verified {
        assert!(
            passed,
            "verify --answer of the read's answer saved {form}:\n{said}\nthe saved answer: {saved}"
        );
    }
    // The same receipt around other content does not verify.
    let forged = root.join("forged-answer.json");
    let mut answer_json: Value = serde_json::from_str(&verified[0].3).unwrap();
    answer_json["content"][0]["text"] = json!("written by nobody");
    std::fs::write(&forged, answer_json.to_string()).unwrap();
    let v = verify(&forged).await.unwrap();
    let stdout = String::from_utf8_lossy(&v.stdout);
    assert!(
        v.status.code() == Some(1) && stdout.contains("FAIL answer"),
        "a forged answer fails: {stdout}{}",
        String::from_utf8_lossy(&v.stderr)
    );
    eprintln!(
        "registries_import: import {:.1} s; served, every upstream ready, in {:.1} s \
            ({}; {readyz}); the approved write held {took} s; whole test {:.1} s",
        import_took.as_secs_f64(),
        ready_after.as_secs_f64(),
        timeline(&std::fs::read_to_string(&log).unwrap_or_default()),
        started.elapsed().as_secs_f64()
    );
    drop(gateway);
}
