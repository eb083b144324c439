//! The MCP configs people already have, read as each client documents them:
//! an `mcpServers` object (Claude Desktop's `claude_desktop_config.json`,
//! Claude Code's `.mcp.json`, Cursor's and Windsurf's `mcp.json`) or VS
//! Code's `servers` with its `inputs` (`.vscode/mcp.json`, JSON with
//! comments). Pure: files in, servers out; nothing is started or written.
//!
//! A value that the client config writes out (an `env` value, a header) may
//! be a credential, so none is kept as text: each becomes a secret for an
//! owner-only file. A reference stays a reference: `${env:VAR}` (and Claude
//! Code's `${VAR}`) to the gateway's own variable, VS Code's `${input:ID}`
//! to a variable the person sets once (`TOOLGATE_INPUT_ID`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use toolgate_gateway::url_credentials;

/// Where a server's variable or header comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// Written out in the client's config: kept in an owner-only file.
    Secret(String),
    /// The gateway's environment variable of this name.
    Env(String),
    /// A value the person must put in this environment variable: what the
    /// client would have prompted for (`${input:…}`) or a text that mixes
    /// references with other characters (`why` says which).
    Asked { variable: String, why: String },
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq)]
pub enum Reach {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, Source>,
    },
    /// `url` holds no credential: a user part is an `Authorization` header
    /// in `headers`, a credential query parameter is in `query`.
    Http {
        url: String,
        headers: BTreeMap<String, Source>,
        query: BTreeMap<String, Source>,
    },
}

/// One server of a client's config.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// Its name in the client's config.
    pub original: String,
    /// Its name in toolgate's (`[servers.NAME]`): the original, tamed.
    pub name: String,
    pub reach: Reach,
}

/// A client config read: the servers taken, and those left out with why.
#[derive(Debug, Default)]
pub struct Read {
    pub format: Format,
    pub servers: Vec<Imported>,
    /// `KEY: why` for each server left out (`mcpServers.NAME`, `servers.NAME.args[2]`, …).
    pub left_out: Vec<String>,
}

/// Which family of config a file is: it decides the snippet that replaces
/// the servers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `mcpServers`: Claude Desktop, Claude Code, Cursor, Windsurf.
    #[default]
    McpServers,
    /// `servers` (+ `inputs`): VS Code.
    VsCode,
}

/// Reads one client config. An error (unreadable, not JSON, neither format)
/// names the file; a server that cannot be taken is left out with its key.
pub fn read(path: &Path) -> Result<Read, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
    let value: Value = serde_json::from_str(&strip_jsonc(&text))
        .map_err(|e| format!("{}: not JSON (or JSON with comments): {e}", path.display()))?;
    let (format, key, servers) = match (value.get("mcpServers"), value.get("servers")) {
        (Some(Value::Object(s)), _) => (Format::McpServers, "mcpServers", s),
        (None, Some(Value::Object(s))) => (Format::VsCode, "servers", s),
        _ => {
            return Err(format!(
                "{}: no `mcpServers` or `servers` object: not an MCP client config (Claude Desktop, Claude Code, Cursor, Windsurf or VS Code)",
                path.display()
            ));
        }
    };
    let inputs: BTreeMap<&str, &Value> = value["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| Some((i["id"].as_str()?, i)))
        .collect();
    let context = Context { folder: workspace_folder(path), inputs };
    let mut read = Read { format, ..Read::default() };
    for (original, server) in servers {
        match one(original, server, &context) {
            Ok(reach) => read.servers.push(Imported {
                original: original.clone(),
                name: tame(original),
                reach,
            }),
            Err((field, why)) => {
                read.left_out.push(format!("{}: {key}.{original}{field}: {why}", path.display()))
            }
        }
    }
    Ok(read)
}

struct Context<'a> {
    /// What `${workspaceFolder}` means: the folder that holds `.vscode/`, or the file's own.
    folder: PathBuf,
    inputs: BTreeMap<&'a str, &'a Value>,
}

fn workspace_folder(path: &Path) -> PathBuf {
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    if dir.file_name().is_some_and(|n| n == ".vscode" || n == ".cursor") {
        dir.parent().map(Path::to_path_buf).unwrap_or(dir)
    } else {
        dir
    }
}

/// One server's transport, or the field that stops it (`.args[1]`) and why.
fn one(name: &str, server: &Value, cx: &Context) -> Result<Reach, (String, String)> {
    let field = |f: &str| format!(".{f}");
    let kind = server["type"].as_str().unwrap_or_default();
    let url = server["url"].as_str().or(server["serverUrl"].as_str());
    if let Some(command) = server["command"].as_str() {
        if server.get("envFile").is_some() {
            return Err((
                field("envFile"),
                "an env file is not read on import: put its variables in `env`, or add them to the \
                    written config's env_file by hand"
                    .into(),
            ));
        }
        let mut args = Vec::new();
        for (i, a) in server["args"].as_array().into_iter().flatten().enumerate() {
            let a =
                a.as_str().ok_or_else(|| (format!(".args[{i}]"), "not a string".to_string()))?;
            args.push(plain(a, cx).ok_or_else(|| {
                (
                    format!(".args[{i}]"),
                    "it reads a variable (`${…}`); toolgate passes arguments as written: give the \
                        server that value in `env`"
                        .to_string(),
                )
            })?);
        }
        let command = plain(command, cx).ok_or_else(|| {
            (field("command"), "it reads a variable (`${…}`); write the program out".to_string())
        })?;
        let env =
            sources(name, &server["env"], cx).map_err(|(k, why)| (format!(".env.{k}"), why))?;
        return Ok(Reach::Stdio { command, args, env });
    }
    let Some(url) = url else {
        return Err((String::new(), "neither `command` (stdio) nor `url` (HTTP)".into()));
    };
    if kind == "sse" {
        return Err((
            field("type"),
            "the 2024-11-05 HTTP+SSE transport; toolgate reaches upstreams over Streamable HTTP \
                (`type: \"http\"`) or stdio"
                .into(),
        ));
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err((field("url"), "not an http:// or https:// URL".into()));
    }
    let mut headers =
        sources(name, &server["headers"], cx).map_err(|(k, why)| (format!(".headers.{k}"), why))?;
    let (url, query) =
        without_credentials(name, url, &mut headers, cx).map_err(|why| (field("url"), why))?;
    Ok(Reach::Http { url, headers, query })
}

/// An HTTP server named to `toolgate init`: its URL's credentials moved
/// out as an import's are.
pub fn http(server: &str, url: &str) -> Result<Reach, String> {
    let cx = Context { folder: PathBuf::from("."), inputs: BTreeMap::new() };
    let mut headers = BTreeMap::new();
    let (url, query) = without_credentials(server, url, &mut headers, &cx)?;
    Ok(Reach::Http { url, headers, query })
}

/// `url` with its credentials moved out, as every written-out value is: a
/// user part (`user:password@`) to an `Authorization: Basic` header, each
/// credential query parameter (`api_key=…`) to the parameters the gateway
/// adds at connect. A reference (`${env:KEY}`) stays one.
fn without_credentials(
    server: &str,
    url: &str,
    headers: &mut BTreeMap<String, Source>,
    cx: &Context,
) -> Result<(String, BTreeMap<String, Source>), String> {
    let Some(split) = url_credentials::split(url) else {
        return Err("not a URL toolgate can read".into());
    };
    if let Some((user, password)) = &split.userinfo {
        if headers.keys().any(|h| h.eq_ignore_ascii_case("authorization")) {
            return Err("it holds a user and password and `headers` an Authorization too: keep one (toolgate sends the header)".into());
        }
        headers.insert(
            "Authorization".into(),
            Source::Secret(url_credentials::basic_authorization(user, password)),
        );
    }
    let mut query = BTreeMap::new();
    for (key, value) in split.query {
        if query.insert(key.clone(), source(server, &key, &value, cx)).is_some() {
            return Err(format!(
                "the query parameter `{key}` is given twice; toolgate sends each once"
            ));
        }
    }
    Ok((split.url, query))
}

/// A text with only `${workspaceFolder}` and `${userHome}` in it, filled in;
/// `None` if it reads any other variable.
fn plain(text: &str, cx: &Context) -> Option<String> {
    let home = std::env::var("HOME").unwrap_or_default();
    let filled = text
        .replace("${workspaceFolder}", &cx.folder.display().to_string())
        .replace("${userHome}", &home);
    (!filled.contains("${")).then_some(filled)
}

/// An `env` or `headers` object: each value's source.
fn sources(
    server: &str,
    values: &Value,
    cx: &Context,
) -> Result<BTreeMap<String, Source>, (String, String)> {
    let mut out = BTreeMap::new();
    for (key, value) in values.as_object().into_iter().flatten() {
        let text = value.as_str().ok_or_else(|| (key.clone(), "not a string".to_string()))?;
        out.insert(key.clone(), source(server, key, text, cx));
    }
    Ok(out)
}

fn source(server: &str, key: &str, text: &str, cx: &Context) -> Source {
    if let Some(filled) = plain(text, cx) {
        return Source::Secret(filled);
    }
    let whole = text
        .strip_prefix("${")
        .and_then(|t| t.strip_suffix('}'))
        .filter(|inner| !inner.contains(['$', '{', '}']));
    match whole {
        Some(inner) if inner.starts_with("input:") => {
            let id = &inner["input:".len()..];
            let described = cx
                .inputs
                .get(id)
                .and_then(|i| i["description"].as_str())
                .map(|d| format!(" ({})", d.chars().take(120).collect::<String>()))
                .unwrap_or_default();
            Source::Asked {
                variable: format!("TOOLGATE_INPUT_{}", variable_name(id)),
                why: format!("the client asked for input `{id}`{described}"),
            }
        }
        // `${env:VAR}` (VS Code, Cursor, Windsurf) or `${VAR}` / `${VAR:-default}` (Claude Code).
        Some(inner) => Source::Env(
            inner
                .strip_prefix("env:")
                .unwrap_or(inner)
                .split(":-")
                .next()
                .unwrap_or_default()
                .to_string(),
        ),
        None => Source::Asked {
            variable: format!("TOOLGATE_{}_{}", variable_name(server), variable_name(key)),
            why: format!(
                "`{key}` mixes references with other text: set it to that text with the references filled in"
            ),
        },
    }
}

/// A name as an environment variable's: upper case, `_` for anything else.
fn variable_name(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' })
        .collect()
}

/// A client's server name as toolgate's: lower case letters, digits and
/// `-`, as exposed names (`SERVER__TOOL`) need; never empty.
pub fn tame(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        let c = if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' };
        if !(c == '-' && (out.is_empty() || out.ends_with('-'))) {
            out.push(c);
        }
    }
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() { "server".into() } else { out }
}

/// JSON with comments (VS Code's `mcp.json`) as JSON: `//` and `/* */`
/// comments and trailing commas go; strings are kept as they are.
pub fn strip_jsonc(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(b.len());
                out.extend_from_slice(&b[start..i]);
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i = (i + 2).min(b.len());
            }
            b',' => {
                // A trailing comma: the next significant byte closes.
                let next =
                    b[i + 1..].iter().position(|c| !c.is_ascii_whitespace()).map(|p| b[i + 1 + p]);
                if !matches!(next, Some(b'}' | b']')) {
                    out.push(b',');
                }
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn jsonc_loses_its_comments_and_trailing_commas_but_not_its_strings() {
        let text = "{\n // a comment\n \"a\": \"http://x/*y*/ // z\", /* b */ \"b\": [1, 2,],\n}";
        let v: Value = serde_json::from_str(&strip_jsonc(text)).unwrap();
        assert_eq!(v, serde_json::json!({"a": "http://x/*y*/ // z", "b": [1, 2]}));
    }

    #[test]
    fn claude_desktop_servers_keep_no_value_and_their_references() {
        let (_d, path) = file(
            "claude_desktop_config.json",
            r#"{"mcpServers": {"GitHub Tools": {"command": "npx", "args": ["-y", "server-github"], "env": {"GITHUB_TOKEN": "ghp_secret", "LEVEL": "${env:LOG_LEVEL}", "HOME_DIR": "${HOME}"}}}}"#,
        );
        let read = read(&path).unwrap();
        assert_eq!(read.format, Format::McpServers);
        let s = &read.servers[0];
        assert_eq!((s.original.as_str(), s.name.as_str()), ("GitHub Tools", "github-tools"));
        let Reach::Stdio { command, args, env } = &s.reach else { panic!("stdio") };
        assert_eq!(
            (command.as_str(), args.as_slice()),
            ("npx", &["-y".to_string(), "server-github".to_string()][..])
        );
        assert_eq!(env["GITHUB_TOKEN"], Source::Secret("ghp_secret".into()));
        assert_eq!(env["LEVEL"], Source::Env("LOG_LEVEL".into()));
        assert_eq!(env["HOME_DIR"], Source::Env("HOME".into()));
    }

    #[test]
    fn vs_code_inputs_become_variables_to_set_and_the_workspace_is_filled_in() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".vscode")).unwrap();
        let path = dir.path().join(".vscode/mcp.json");
        std::fs::write(
            &path,
            r#"{
              // the team's servers
              "inputs": [{"type": "promptString", "id": "api-key", "description": "Search API key", "password": true}],
              "servers": {
                "files": {"type": "stdio", "command": "fs-server", "args": ["${workspaceFolder}/docs"]},
                "search": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${input:api-key}", "X-Key": "${input:api-key}"}},
                "bad": {"type": "stdio", "command": "x", "args": ["${env:TOKEN}"]},
                "remote": {"type": "http", "url": "ftp://example.com/mcp"},
              },
            }"#,
        )
        .unwrap();
        let read = read(&path).unwrap();
        assert_eq!(read.format, Format::VsCode);
        let Reach::Stdio { args, .. } =
            &read.servers.iter().find(|s| s.name == "files").unwrap().reach
        else {
            panic!()
        };
        assert_eq!(
            args[0],
            format!("{}/docs", std::fs::canonicalize(dir.path()).unwrap().display())
        );
        let Reach::Http { headers, .. } =
            &read.servers.iter().find(|s| s.name == "search").unwrap().reach
        else {
            panic!()
        };
        assert!(
            matches!(&headers["X-Key"], Source::Asked { variable, why } if variable == "TOOLGATE_INPUT_API_KEY" && why.contains("Search API key"))
        );
        assert!(
            matches!(&headers["Authorization"], Source::Asked { variable, .. } if variable == "TOOLGATE_SEARCH_AUTHORIZATION")
        );
        // Each server left out names the file and the key.
        assert_eq!(read.left_out.len(), 2, "{:?}", read.left_out);
        assert!(
            read.left_out
                .iter()
                .any(|l| l.contains("mcp.json: servers.bad.args[0]: it reads a variable")),
            "{:?}",
            read.left_out
        );
        assert!(
            read.left_out
                .iter()
                .any(|l| l.contains("servers.remote.url: not an http:// or https:// URL")),
            "{:?}",
            read.left_out
        );
    }

    #[test]
    fn a_file_that_is_no_client_config_says_so_with_its_name() {
        let (_d, path) = file("settings.json", r#"{"editor.fontSize": 14}"#);
        let e = read(&path).unwrap_err();
        assert!(e.contains("settings.json: no `mcpServers` or `servers` object"), "{e}");
        let (_d, path) = file("broken.json", "{\"mcpServers\": ");
        assert!(read(&path).unwrap_err().contains("broken.json: not JSON"));
        assert_eq!(tame("  My__Server!! "), "my-server");
        assert_eq!(tame("!!"), "server");
    }
}
