//! The real servers from the registries, boxed (issue 59), driven through a
//! real gateway (`toolgate serve`) with the stock Python SDK client:
//! - `@modelcontextprotocol/server-filesystem` (`npx -y`) works in its
//!   directory and cannot leave it, even with its own argument changed to `/`
//!   (the box's `write` is the directory alone);
//! - `server-memory` and `server-everything` work, fetched through the egress
//!   proxy with `registry.npmjs.org` on the list;
//! - `mcp-server-time` and `mcp-server-git` (`uvx`) start through the proxy
//!   with `pypi.org` and `files.pythonhosted.org` on the list, and without
//!   them stay down, `toolgate doctor` saying why.
//!
//! Each box starts with an empty cache (its home is in the test's state dir),
//! so each start fetches its package: 10-60 s. Each test first checks that
//! the registry answers from this machine, and when it does not, says so in
//! one line and does nothing else. `uvx` is the one `scripts/test` puts in
//! `.venv-sdk` (tests/python/requirements.txt).

mod demo_common;
mod ops_common;
mod sandbox_common;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::{Duration, Instant};

use ops_common::{BIN, tail};
use sandbox_common::{
    client, log_line, owner_only, reachable, skip, start_gateway, text, toml, toml_list, venv,
};
use serde_json::{Value, json};

const NPM: &str = "https://registry.npmjs.org/@modelcontextprotocol%2fserver-memory";
const PYPI: &str = "https://pypi.org/simple/mcp-server-time/";
/// How long a box may take to fetch its package and list its tools.
const START_S: u64 = 240;

/// A registry entry for each tool: `automatic`, and read-only unless it writes.
fn registry(reads: &[&str], writes: &[&str]) -> String {
    let read = reads
        .iter()
        .map(|t| format!("[registry.\"{t}\"]\nclass = \"automatic\"\nread_only = true\n"));
    let write = writes.iter().map(|t| format!("[registry.\"{t}\"]\nclass = \"automatic\"\n"));
    read.chain(write).collect()
}

fn config(servers: &str, registry: &str) -> String {
    format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\nupstream_timeout_ms = \
            60000\n\n{servers}\n{registry}\n[callers.agent]\ntenant = \"acme\"\nanonymous = true\n"
    )
}

/// The test's folder: a config there, the gateway's HOME beside it (with a
/// key the boxes must not see).
struct Site {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
}

impl Site {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("home");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        owner_only(&home.join(".ssh/id_ed25519"), "not a real key\n");
        Site { _dir: dir, root, home }
    }

    fn write_config(&self, text: &str) -> PathBuf {
        let path = self.root.join("toolgate.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    async fn gateway(&self, config: &Path) -> ops_common::Proc {
        start_gateway(
            config,
            &self.root.join("gateway.log"),
            &[("HOME", self.home.to_str().unwrap())],
        )
        .await
    }
}

/// A tool result that is not an error, and its text.
fn ok<'a>(results: &'a Value, i: usize, what: &str, log: &Path) -> &'a str {
    let r = &results[i];
    assert!(r.get("content").is_some() && r["isError"] != true, "{what}: {r:#}\n{}", tail(log, 40));
    text(r)
}

/// A tool error whose text says the kernel refused (EACCES / EPERM).
fn denied(results: &Value, i: usize, what: &str) {
    let r = &results[i];
    assert_eq!(r["isError"], true, "{what} must fail: {r:#}");
    let t = text(r);
    assert!(
        t.contains("EACCES")
            || t.contains("EPERM")
            || t.contains("ermission denied")
            || t.contains("not permitted"),
        "{what}: the box, not the server, refused it: {t}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filesystem_server_works_in_its_directory_and_cannot_leave_it() {
    const TEST: &str =
        "sandbox_registries::the_filesystem_server_works_in_its_directory_and_cannot_leave_it";
    if let Err(why) = reachable(NPM) {
        return skip(
            TEST,
            &format!("the npm registry cannot be reached from this machine ({NPM}: {why})"),
        );
    }
    let started = Instant::now();
    let site = Site::new();
    let docs = site.root.join("docs");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(docs.join("a.txt"), "hello from docs").unwrap();
    let state = site.root.join("state");
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let outside_tmp =
        PathBuf::from(format!("/tmp/toolgate-filesystem-{}-{nanos}.txt", std::process::id()));
    let real_home = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
    // The same server twice, boxed alike: given its directory, and given `/`.
    let server = |name: &str, arg: &Path| {
        format!(
            "[servers.{name}]\ncommand = \"npx\"\nargs = \
                [\"-y\", \"@modelcontextprotocol/server-filesystem\", \
                {}]\n[servers.{name}.sandbox]\nwrite = {}\nnetwork = [\"registry.npmjs.org\"]\n\n",
            toml(arg),
            toml_list(std::slice::from_ref(&docs))
        )
    };
    let servers = server("files", &docs) + &server("rooted", Path::new("/"));
    let tools = |s: &str| [format!("{s}__read_text_file"), format!("{s}__list_directory")];
    let reads: Vec<String> = tools("files").into_iter().chain(tools("rooted")).collect();
    let reads: Vec<&str> = reads.iter().map(String::as_str).collect();
    let config = site.write_config(&config(
        &servers,
        &registry(&reads, &["files__write_file", "rooted__write_file"]),
    ));
    let gateway = site.gateway(&config).await;

    // Files outside the grant that exist: the server, given `/`, would
    // replace them (a new file it places by reading each directory from `/`
    // down, which the box refuses before any write).
    let notes = site.root.join("notes.txt");
    std::fs::write(&notes, "original notes").unwrap();
    std::fs::write(&outside_tmp, "original tmp").unwrap();
    let _cleanup = Remove(outside_tmp.clone());
    let config_text = std::fs::read_to_string(&config).unwrap();

    let p = |p: &Path| p.display().to_string();
    let calls = json!([
        {"tool": "files__read_text_file", "arguments": {"path": p(&docs.join("a.txt"))}},
        {"tool": "files__write_file", "arguments": {"path": p(&docs.join("new.txt")), "content": "written from the box"}},
        {"tool": "files__list_directory", "arguments": {"path": p(&docs)}},
        {"tool": "rooted__read_text_file", "arguments": {"path": p(&docs.join("a.txt"))}},
        {"tool": "rooted__read_text_file", "arguments": {"path": p(&state.join("keys/keys.json"))}},
        {"tool": "rooted__read_text_file", "arguments": {"path": p(&state.join("requeststate.key"))}},
        {"tool": "rooted__read_text_file", "arguments": {"path": p(&config)}},
        {"tool": "rooted__read_text_file", "arguments": {"path": p(&site.home.join(".ssh/id_ed25519"))}},
        {"tool": "rooted__list_directory", "arguments": {"path": p(&state)}},
        {"tool": "rooted__list_directory", "arguments": {"path": p(&real_home)}},
        {"tool": "rooted__write_file", "arguments": {"path": p(&config), "content": "escaped"}},
        {"tool": "rooted__write_file", "arguments": {"path": p(&notes), "content": "escaped"}},
        {"tool": "rooted__write_file", "arguments": {"path": p(&outside_tmp), "content": "escaped"}},
        {"tool": "rooted__write_file", "arguments": {"path": p(&site.root.join("new-beside-the-config.txt")), "content": "escaped"}},
        {"tool": "rooted__write_file", "arguments": {"path": p(&docs.join("a.txt")), "content": "rewritten from the box, rooted"}},
    ]);
    let got = client(&gateway.url, START_S, &calls).await;
    let log = &gateway.log;
    assert_eq!(
        got["missing"],
        json!([]),
        "the boxed servers never listed their tools:\n{got:#}\n{}",
        tail(log, 60)
    );
    let results = &got["results"];
    // In its directory, it works.
    assert_eq!(ok(results, 0, "read in its directory", log), "hello from docs");
    ok(results, 1, "write in its directory", log);
    assert_eq!(std::fs::read_to_string(docs.join("new.txt")).unwrap(), "written from the box");
    assert!(ok(results, 2, "list its directory", log).contains("a.txt"));
    // Given `/`, the server would go anywhere; the box keeps it in.
    assert_eq!(ok(results, 3, "rooted: read in the directory", log), "hello from docs");
    denied(results, 4, "rooted: read the keys");
    denied(results, 5, "rooted: read requeststate.key");
    denied(results, 6, "rooted: read the config");
    denied(results, 7, "rooted: read the gateway's ~/.ssh");
    denied(results, 8, "rooted: list the state dir");
    denied(results, 9, "rooted: list the real home");
    denied(results, 10, "rooted: replace the config");
    denied(results, 11, "rooted: replace a file beside the config");
    denied(results, 12, "rooted: replace a file in /tmp");
    denied(results, 13, "rooted: make a file beside the config");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), config_text);
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "original notes");
    assert_eq!(std::fs::read_to_string(&outside_tmp).unwrap(), "original tmp");
    assert!(!site.root.join("new-beside-the-config.txt").exists());
    let strays: Vec<_> = std::fs::read_dir(&site.root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(strays.is_empty(), "no temporary file left outside the grant: {strays:?}");
    ok(results, 14, "rooted: replace a file in the directory", log);
    assert_eq!(
        std::fs::read_to_string(docs.join("a.txt")).unwrap(),
        "rewritten from the box, rooted"
    );
    // Its package came through the proxy.
    assert!(
        log_line(log, &["sandbox", "allowed", "registry.npmjs.org"], Duration::from_secs(5))
            .await
            .is_some(),
        "{}",
        tail(log, 40)
    );
    eprintln!(
        "filesystem: listed after {} s, done in {:.1} s",
        got["waited_s"],
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_and_everything_servers_work_in_the_box() {
    const TEST: &str = "sandbox_registries::the_memory_and_everything_servers_work_in_the_box";
    if let Err(why) = reachable(NPM) {
        return skip(
            TEST,
            &format!("the npm registry cannot be reached from this machine ({NPM}: {why})"),
        );
    }
    let started = Instant::now();
    let site = Site::new();
    let data = site.root.join("memory");
    std::fs::create_dir(&data).unwrap();
    let memory_file = data.join("memory.jsonl");
    let servers = format!(
        "[servers.memory]\ncommand = \"npx\"\nargs = \
             [\"-y\", \"@modelcontextprotocol/server-memory\"]\nenv = {{ MEMORY_FILE_PATH = {} \
             }}\n[servers.memory.sandbox]\nwrite = {}\nnetwork = [\"registry.npmjs.org\"]\n\n\
         [servers.everything]\ncommand = \"npx\"\nargs = \
             [\"-y\", \
             \"@modelcontextprotocol/server-everything\"]\n[servers.everything.sandbox]\nnetwork = \
             [\"registry.npmjs.org\"]\n\n",
        toml(&memory_file),
        toml_list(std::slice::from_ref(&data))
    );
    let registry = registry(
        &[
            "memory__read_graph",
            "memory__search_nodes",
            "everything__echo",
            "everything__get-sum",
            "everything__get-env",
        ],
        &["memory__create_entities"],
    );
    let config = site.write_config(&config(&servers, &registry));
    let gateway = site.gateway(&config).await;
    let entity = json!({"entities": [{"name": "toolgate", "entityType": "gateway", "observations": ["runs its servers in a box"]}]});
    let calls = json!([
        {"tool": "memory__create_entities", "arguments": entity},
        {"tool": "memory__read_graph", "arguments": {}},
        {"tool": "memory__search_nodes", "arguments": {"query": "box"}},
        {"tool": "everything__echo", "arguments": {"message": "from inside"}},
        {"tool": "everything__get-sum", "arguments": {"a": 20, "b": 22}},
        {"tool": "everything__get-env", "arguments": {}},
    ]);
    let got = client(&gateway.url, START_S, &calls).await;
    let log = &gateway.log;
    assert_eq!(
        got["missing"],
        json!([]),
        "the boxed servers never listed their tools:\n{got:#}\n{}",
        tail(log, 60)
    );
    let results = &got["results"];
    ok(results, 0, "create an entity", log);
    assert!(ok(results, 1, "read the graph", log).contains("runs its servers in a box"));
    assert!(ok(results, 2, "search", log).contains("toolgate"));
    assert!(
        std::fs::read_to_string(&memory_file).unwrap().contains("runs its servers in a box"),
        "the memory file is where its grant is"
    );
    assert!(ok(results, 3, "echo", log).contains("from inside"));
    assert!(ok(results, 4, "sum", log).contains("42"));
    // What the box's environment is: its own HOME, the proxy, none of the gateway's.
    let env = ok(results, 5, "get-env", log);
    let env: Value = serde_json::from_str(env).unwrap_or_else(|_| panic!("get-env is JSON: {env}"));
    let home = env["HOME"].as_str().unwrap_or_default();
    assert!(
        home.starts_with(site.root.join("state").to_str().unwrap())
            && home != site.home.to_str().unwrap(),
        "the box's own HOME: {env:#}"
    );
    assert_eq!(env["HTTPS_PROXY"], "http://127.0.0.1:3128", "{env:#}");
    eprintln!(
        "memory and everything: listed after {} s, done in {:.1} s",
        got["waited_s"],
        started.elapsed().as_secs_f64()
    );
}

/// A git repository with one commit, for `mcp-server-git`.
fn repository(dir: &Path) {
    std::fs::create_dir(dir).unwrap();
    std::fs::write(dir.join("README"), "boxed\n").unwrap();
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
    git(&["commit", "-q", "-m", "a commit made outside the box"]);
}

/// `uvx` servers: time, and git on `repo`, with `network` as their list.
fn uvx_servers(repo: &Path, network: &str) -> String {
    let uvx = venv().join("bin/uvx");
    assert!(
        uvx.exists(),
        "no {}: run scripts/test (tests/python/requirements.txt installs uv)",
        uvx.display()
    );
    // uvx runs uv beside it.
    let tools = toml_list(&[venv().join("bin/uv"), uvx.clone()]);
    format!(
        "[servers.time]\ncommand = {uvx}\nargs = [\"mcp-server-time\"]\n[servers.time.sandbox]\nread = {tools}\nnetwork = {network}\n\n\
         [servers.git]\ncommand = {uvx}\nargs = [\"mcp-server-git\", \"--repository\", \
             {repo}]\n[servers.git.sandbox]\nread = {tools}\nwrite = [{repo}]\nnetwork = \
             {network}\n\n",
        uvx = toml(&uvx),
        repo = toml(repo),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uvx_servers_start_through_the_egress_proxy() {
    const TEST: &str = "sandbox_registries::uvx_servers_start_through_the_egress_proxy";
    if let Err(why) = reachable(PYPI) {
        return skip(TEST, &format!("PyPI cannot be reached from this machine ({PYPI}: {why})"));
    }
    let started = Instant::now();
    let site = Site::new();
    let repo = site.root.join("repo");
    repository(&repo);
    let servers = uvx_servers(&repo, "[\"pypi.org\", \"files.pythonhosted.org\"]");
    let registry = registry(&["time__get_current_time", "git__git_status", "git__git_log"], &[]);
    let config = site.write_config(&config(&servers, &registry));
    let gateway = site.gateway(&config).await;
    let r = repo.display().to_string();
    let calls = json!([
        {"tool": "time__get_current_time", "arguments": {"timezone": "UTC"}},
        {"tool": "git__git_status", "arguments": {"repo_path": r}},
        {"tool": "git__git_log", "arguments": {"repo_path": r}},
    ]);
    let got = client(&gateway.url, START_S, &calls).await;
    let log = &gateway.log;
    assert_eq!(
        got["missing"],
        json!([]),
        "the boxed uvx servers never listed their tools:\n{got:#}\n{}",
        tail(log, 80)
    );
    let results = &got["results"];
    assert!(ok(results, 0, "the time", log).contains("UTC"));
    ok(results, 1, "git status", log);
    assert!(ok(results, 2, "git log", log).contains("a commit made outside the box"));
    for host in ["pypi.org", "files.pythonhosted.org"] {
        assert!(
            log_line(log, &["sandbox", "allowed", host], Duration::from_secs(5)).await.is_some(),
            "{host} was reached through the proxy:\n{}",
            tail(log, 40)
        );
    }
    eprintln!(
        "uvx time and git: listed after {} s, done in {:.1} s",
        got["waited_s"],
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uvx_servers_without_the_registries_stay_down_and_say_why() {
    const TEST: &str =
        "sandbox_registries::uvx_servers_without_the_registries_stay_down_and_say_why";
    if let Err(why) = reachable(PYPI) {
        return skip(TEST, &format!("PyPI cannot be reached from this machine ({PYPI}: {why})"));
    }
    let started = Instant::now();
    let site = Site::new();
    let repo = site.root.join("repo");
    repository(&repo);
    // A list, but not the one uvx needs.
    let servers = uvx_servers(&repo, "[\"registry.npmjs.org\"]");
    let config = site.write_config(&config(
        &servers,
        &registry(&["time__get_current_time", "git__git_status"], &[]),
    ));
    let out = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new(BIN)
            .args(["doctor", "--config"])
            .arg(&config)
            .env("HOME", &site.home)
            .env("RUST_LOG", "info")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("doctor finished")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "doctor names the servers that are down:\n{stdout}\n{stderr}");
    for server in ["time", "git"] {
        let fail = stdout
            .lines()
            .skip_while(|l| !l.starts_with(&format!("FAIL  upstream {server}:")))
            .take(2)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            !fail.is_empty(),
            "doctor says upstream {server} is down:\n{stdout}\n{}",
            tail_of(&stderr, 30)
        );
        // Why: the registry it could not reach, in the server's own last words.
        assert!(
            fail.contains("pypi.org"),
            "doctor's reason names the registry the box refused:\n{fail}\n\n{stdout}\n{}",
            tail_of(&stderr, 30)
        );
    }
    // And the gateway's log names the refusal and the line to change.
    assert!(
        stderr.lines().any(|l| l.contains("sandbox")
            && l.contains("refused")
            && l.contains("pypi.org")
            && l.contains("servers.time.sandbox.network")),
        "{}",
        tail_of(&stderr, 40)
    );
    eprintln!(
        "uvx without the registries: doctor said why in {:.1} s:\n{stdout}",
        started.elapsed().as_secs_f64()
    );

    // Served, the server stays down: its tools are not listed.
    let gateway = site.gateway(&config).await;
    let got = client(
        &gateway.url,
        12,
        &json!([{"tool": "time__get_current_time", "arguments": {"timezone": "UTC"}}]),
    )
    .await;
    assert_eq!(got["missing"], json!(["time__get_current_time"]), "{got:#}");
}

/// Removes a file outside the test's folder, whatever the test's end.
struct Remove(PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tail_of(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
