//! `toolgate init --out DIR`: a config for a person with no client config to
//! import, from the servers they name — with flags (`--server
//! NAME=COMMAND…`, `--url NAME=URL`, `--env NAME.VAR=VALUE`), or, on a
//! terminal without them, by asking. The config is written as `import`
//! writes one: no credential in it, a registry from each tool's regret,
//! pinned contracts.

use std::collections::BTreeMap;
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::bail;

use crate::clients::{self, Format, Imported, Reach, Source};
use toolgate_core::visible::visible;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The folder to write toolgate.toml, its secrets and its pins into (it must not hold a toolgate.toml yet).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// A stdio server: NAME=COMMAND [ARG…] (split at spaces). Repeatable.
    #[arg(long, value_name = "NAME=COMMAND")]
    pub server: Vec<String>,
    /// A Streamable HTTP server: NAME=URL (http:// or https://). Repeatable.
    #[arg(long, value_name = "NAME=URL")]
    pub url: Vec<String>,
    /// A variable a stdio server needs: NAME.VAR=VALUE (kept in an owner-only file, never in the config). Repeatable.
    #[arg(long, value_name = "NAME.VAR=VALUE")]
    pub env: Vec<String>,
    /// Where the written config serves MCP over HTTP.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
    pub listen: SocketAddr,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let servers = if args.server.is_empty() && args.url.is_empty() {
        if !std::io::stdin().is_terminal() {
            bail!(
                "name the servers: --server NAME=COMMAND or --url NAME=URL (or run `toolgate init` in a terminal to be asked)"
            );
        }
        ask()?
    } else {
        from_flags(&args)?
    };
    if servers.is_empty() {
        bail!("no server named; nothing was written");
    }
    let taken = servers.into_iter().map(|s| (None, Format::McpServers, s)).collect();
    crate::import::write(taken, &args.out, args.listen).await
}

/// The servers the flags name, each variable kept as a secret.
fn from_flags(args: &Args) -> anyhow::Result<Vec<Imported>> {
    let mut env: BTreeMap<String, BTreeMap<String, Source>> = BTreeMap::new();
    for e in &args.env {
        let Some((name, var, value)) = e
            .split_once('.')
            .and_then(|(n, rest)| rest.split_once('=').map(|(v, value)| (n, v, value)))
        else {
            bail!(
                "--env `{}`: give NAME.VAR=VALUE (the server's name, the variable, its value)",
                e.split('=').next().unwrap_or_default()
            );
        };
        env.entry(name.to_string())
            .or_default()
            .insert(var.to_string(), Source::Secret(value.to_string()));
    }
    let mut servers = Vec::new();
    for s in &args.server {
        let Some((name, command)) = s.split_once('=') else {
            bail!("--server `{s}`: give NAME=COMMAND [ARG…]")
        };
        let mut words = command.split_whitespace().map(str::to_string);
        let Some(program) = words.next() else { bail!("--server `{name}`: no command after `=`") };
        servers.push(server(
            name,
            Reach::Stdio {
                command: program,
                args: words.collect(),
                env: env.remove(name).unwrap_or_default(),
            },
        )?);
    }
    for u in &args.url {
        let Some((name, url)) = u.split_once('=') else { bail!("--url `{u}`: give NAME=URL") };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            bail!("--url `{name}`: `{url}` is not an http:// or https:// URL");
        }
        let reach =
            clients::http(name, url).map_err(|why| anyhow::anyhow!("--url `{name}`: {why}"))?;
        servers.push(server(name, reach)?);
    }
    if let Some(name) = env.keys().next() {
        bail!("--env names `{name}`, which no --server names (variables are for stdio servers)");
    }
    Ok(servers)
}

fn server(name: &str, reach: Reach) -> anyhow::Result<Imported> {
    if name.trim().is_empty() {
        bail!("a server needs a name before `=`");
    }
    Ok(Imported { original: name.to_string(), name: clients::tame(name), reach })
}

/// Asks, on the terminal, for each server until an empty name.
fn ask() -> anyhow::Result<Vec<Imported>> {
    println!("toolgate init: a config for the MCP servers you name (an empty name finishes).");
    let mut servers = Vec::new();
    loop {
        let name = prompt("\nServer name: ")?;
        if name.is_empty() {
            return Ok(servers);
        }
        let how = prompt("Its URL, or the command that starts it: ")?;
        let reach = if how.starts_with("http://") || how.starts_with("https://") {
            match clients::http(&name, &how) {
                Ok(reach) => reach,
                Err(why) => {
                    println!("  ({why}: `{}` skipped)", visible(&name));
                    continue;
                }
            }
        } else {
            let mut words = how.split_whitespace().map(str::to_string);
            let Some(command) = words.next() else {
                println!("  (no command: `{}` skipped)", visible(&name));
                continue;
            };
            let mut env = BTreeMap::new();
            loop {
                let var = prompt(
                    "A variable it needs, VAR=VALUE (kept in an owner-only file; empty when done): ",
                )?;
                let Some((var, value)) = var.split_once('=') else { break };
                env.insert(var.trim().to_string(), Source::Secret(value.to_string()));
            }
            Reach::Stdio { command, args: words.collect(), env }
        };
        servers.push(server(&name, reach)?);
    }
}

fn prompt(question: &str) -> anyhow::Result<String> {
    print!("{question}");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim_end_matches(['\r', '\n']).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(server: &[&str], url: &[&str], env: &[&str]) -> Args {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Args {
            out: PathBuf::from("x"),
            server: owned(server),
            url: owned(url),
            env: owned(env),
            listen: "127.0.0.1:0".parse().unwrap(),
        }
    }

    #[test]
    fn flags_name_servers_and_their_variables_as_secrets() {
        let servers = from_flags(&args(
            &["GitHub=npx -y server-github"],
            &["search=https://search.example/mcp"],
            &["GitHub.TOKEN=ghp_x"],
        ))
        .unwrap();
        let Reach::Stdio { command, args, env } = &servers[0].reach else { panic!() };
        assert_eq!((servers[0].name.as_str(), command.as_str(), args.len()), ("github", "npx", 2));
        assert_eq!(env["TOKEN"], Source::Secret("ghp_x".into()));
        assert!(
            matches!(&servers[1].reach, Reach::Http { url, .. } if url == "https://search.example/mcp")
        );
    }

    #[test]
    fn a_flag_that_cannot_be_read_says_what_it_needs() {
        let e = |a: Args| from_flags(&a).unwrap_err().to_string();
        assert!(e(args(&["github"], &[], &[])).contains("NAME=COMMAND"));
        assert!(e(args(&[], &["s=ftp://x"], &[])).contains("not an http:// or https:// URL"));
        assert!(e(args(&["a=x"], &[], &["b.T=1"])).contains("which no --server names"));
        let malformed = e(args(&["a=x"], &[], &["TOKEN=s3cret"]));
        assert!(
            malformed.contains("NAME.VAR=VALUE") && !malformed.contains("s3cret"),
            "a value is never echoed: {malformed}"
        );
    }
}
