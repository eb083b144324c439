//! A stdio upstream: a child process speaking newline-delimited JSON-RPC on
//! its stdin/stdout. One reader task routes responses to their waiting
//! callers; the child's stderr goes to our log, never to our stdout.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use serde_json::Value;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{Mutex, mpsc, oneshot, watch};

use super::{Transport, UpstreamError};
use crate::lines::{BoundedLines, Line, id_in_head};
use crate::sandbox::{self, Boxed, Prepared, Sandbox, host, proxy::Counts};
use crate::wire::{self, Id, Message};

/// A line longer than this is a misbehaving server, not a message.

/// Calls waiting for their answer: the message, or why it cannot be read.
type Pending = Arc<std::sync::Mutex<HashMap<Id, oneshot::Sender<Result<Message, UpstreamError>>>>>;

/// The gateway's variables a stdio server inherits: the official MCP SDKs'
/// default environment (`get_default_environment`, `getDefaultEnvironment`),
/// with the locale and the time zone. Anything else is given by `env`,
/// `env_env` or `env_file`.
pub const INHERITED: &[&str] =
    &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// The gateway's variables that name this machine's proxy; with its CA
/// bundles (`sandbox::CA_VARIABLES`, as `[tls] ca_file` is for toolgate's
/// own connections) they pass to every stdio server: without them an `npx`
/// or `uvx` start behind a company CA or proxy fails to fetch its package.
/// A boxed server with an allow-list gets toolgate's proxy instead.
pub const PASSED: &[&str] =
    &["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"];

pub(crate) struct StdioChannel {
    /// Lines for the writer task, which owns the child's stdin.
    outbox: mpsc::UnboundedSender<String>,
    pending: Pending,
    next_id: AtomicI64,
    alive: watch::Receiver<bool>,
    /// The last lines the server wrote to stderr: why it stopped, said where
    /// a person looks.
    last_words: LastWords,
    child: Mutex<Child>,
    /// The box's proxy and cgroup, which go with the channel.
    _boxed: Option<Boxed>,
    /// Its box's connections through the proxy.
    network: Arc<Counts>,
}

impl StdioChannel {
    /// Starts `transport`'s program (a `Transport::Stdio`), in its box
    /// unless `sandbox = "off"`; `network` counts the box's connections.
    pub(crate) fn spawn(
        server: &str,
        transport: &Transport,
        inbox: super::Inbox,
        max_line: usize,
        network: Arc<Counts>,
    ) -> Result<Self, UpstreamError> {
        let Transport::Stdio { command, args, env, sandbox } = transport else {
            unreachable!("a stdio channel is opened for a stdio transport")
        };
        let env = env
            .iter()
            .map(|(k, source)| source.read(&format!("variable `{k}`")).map(|v| (k, v)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut prepared = match sandbox {
            Sandbox::Off => None,
            Sandbox::Boxed(profile) => Some(
                Prepared::new(server, profile, command, host::support())
                    .map_err(|why| unboxable(server, &why))?,
            ),
        };
        let mut spawning = Command::new(command);
        spawning
            .args(args)
            // Not the gateway's whole environment: it holds callers' tokens
            // and other servers' credentials (`*_env`). What a process needs
            // to run, as the official SDKs pass it, its CA bundle and proxy,
            // and what the config gives.
            .env_clear()
            .envs(
                INHERITED
                    .iter()
                    .chain(sandbox::CA_VARIABLES)
                    .chain(PASSED)
                    .filter_map(|k| std::env::var_os(k).map(|v| (*k, v))),
            )
            .envs(prepared.iter().flat_map(|p| p.env.iter()))
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match prepared.as_mut() {
            // Its own session and process group (made in the box): wrappers
            // such as `npx` start the real server as a grandchild, which must
            // go when the channel goes.
            Some(boxed) => {
                let mut part = boxed.child.take().expect("a box is entered once");
                // SAFETY: `enter` makes system calls on memory made before the fork.
                unsafe { spawning.pre_exec(move || sandbox::enter(&mut part)) };
            }
            None => {
                spawning.process_group(0);
            }
        }
        let mut child = spawning.spawn().map_err(|e| match sandbox {
            Sandbox::Boxed(_) => UpstreamError::Unavailable(format!(
                "cannot start `{command}` in its sandbox: {e} (`toolgate doctor` says what this \
                    host offers)"
            )),
            Sandbox::Off => UpstreamError::Unavailable(format!("cannot start `{command}`: {e}")),
        })?;
        let boxed = prepared
            .map(|p| Boxed::start(server, p, network.clone()))
            .transpose()
            .map_err(|why| UpstreamError::Unavailable(format!("`{server}`'s sandbox: {why}")))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let pending: Pending = Arc::default();
        let (alive_tx, alive) = watch::channel(true);

        let last_words = LastWords::default();
        tokio::spawn(last_words.clone().keep(server.to_string(), stderr));

        let (outbox, lines_out) = mpsc::unbounded_channel();
        tokio::spawn(write_lines(stdin, lines_out));

        let (name, routes, replies) = (server.to_string(), pending.clone(), outbox.clone());
        tokio::spawn(async move {
            let mut lines = BoundedLines::new(stdout, max_line);
            while let Ok(Some(line)) = lines.next_line().await {
                let line = match line {
                    Line::Text(line) => line,
                    Line::TooLong(head) => {
                        // The call it answers (if its head names one) fails now, as
                        // over HTTP, rather than wait out its deadline.
                        tracing::warn!(server = %name, max = max_line, "a line from the upstream exceeds max_upstream_message_bytes; skipped");
                        let waiting = id_in_head(&head).and_then(|id| {
                            routes.lock().unwrap_or_else(|p| p.into_inner()).remove(&Id::Number(id))
                        });
                        if let Some(tx) = waiting {
                            let _ = tx.send(Err(UpstreamError::Protocol(format!(
                                "the upstream's answer exceeds [gateway] \
                                    max_upstream_message_bytes ({max_line})"
                            ))));
                        }
                        continue;
                    }
                    bad => {
                        tracing::warn!(server = %name, line = ?bad, "unreadable line from upstream; skipped");
                        continue;
                    }
                };
                if line.trim().is_empty() {
                    continue;
                }
                let message: Message = match serde_json::from_str(&line) {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(server = %name, error = %e, "upstream sent something that is not JSON-RPC; skipped");
                        continue;
                    }
                };
                route(&name, message, &routes, &inbox, &replies);
            }
            let _ = alive_tx.send(false);
            // Whoever still waits learns the upstream is gone.
            routes.lock().unwrap_or_else(|p| p.into_inner()).clear();
        });

        Ok(Self {
            outbox,
            pending,
            next_id: AtomicI64::new(1),
            alive,
            last_words,
            child: Mutex::new(child),
            _boxed: boxed,
            network,
        })
    }

    /// Whether the child is alive: flips to `false` once it exits (its stdout closed).
    pub(crate) fn closed(&self) -> watch::Receiver<bool> {
        self.alive.clone()
    }

    fn is_alive(&self) -> bool {
        *self.alive.borrow()
    }

    pub(crate) async fn request(
        &self,
        method: &str,
        params: &Value,
    ) -> Result<Message, UpstreamError> {
        if !self.is_alive() {
            return Err(UpstreamError::Unavailable(format!(
                "the upstream process has exited{}",
                self.ended().await
            )));
        }
        let id = Id::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), tx);
        // Whether answered, failed or abandoned (a deadline, a caller gone),
        // the waiting entry goes with this call.
        let _forget = Forget { pending: &self.pending, id: id.clone(), outbox: &self.outbox };
        self.send_line(&wire::request(&id, method, params)).await?;
        // A dropped sender means the reader ended: the process is gone.
        match rx.await {
            Ok(answer) => answer,
            Err(_) => Err(UpstreamError::Lost(format!(
                "the upstream process exited{}",
                self.ended().await
            ))),
        }
    }

    /// How the process ended and the last lines of its stderr, as a tail
    /// for a message.
    async fn ended(&self) -> String {
        let status = {
            let mut child = self.child.lock().await;
            // Its stdout closed: give it a moment to be reaped.
            match tokio::time::timeout(std::time::Duration::from_millis(300), child.wait()).await {
                Ok(Ok(status)) => format!(" ({status})"),
                _ => String::new(),
            }
        };
        let words = self.last_words.after_eof().await;
        let refused = self.network.last_refused.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let refused = refused
            .map(|why| format!("; its sandbox's proxy refused the last connection: {why}"))
            .unwrap_or_default();
        if words.is_empty() {
            format!("{status}{refused}")
        } else {
            format!("{status}; its stderr ended: {words}{refused}")
        }
    }

    pub(crate) async fn notify(&self, method: &str, params: &Value) -> Result<(), UpstreamError> {
        self.send_line(&wire::notification(method, params)).await
    }

    async fn send_line(&self, line: &str) -> Result<(), UpstreamError> {
        self.outbox.send(line.to_string()).map_err(|_| {
            UpstreamError::Unavailable("the upstream process no longer reads its input".into())
        })
    }
}

async fn write_lines(mut stdin: ChildStdin, mut lines: mpsc::UnboundedReceiver<String>) {
    while let Some(line) = lines.recv().await {
        let written = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.write_all(b"\n").await?;
            stdin.flush().await
        };
        if written.await.is_err() {
            break;
        }
    }
}

/// Why a server cannot be boxed, and the line that runs it unboxed when
/// the host is what lacks.
fn unboxable(server: &str, why: &str) -> UpstreamError {
    if host::support().can_box() {
        UpstreamError::Unavailable(format!("cannot build `{server}`'s sandbox: {why}"))
    } else {
        UpstreamError::Unavailable(format!(
            "{why}. `{server}` is not started unboxed: to run it as toolgate's own user, with \
                nothing between it and toolgate's keys, write `sandbox = \"off\"` under \
                [servers.{server}] (docs/SANDBOX.md)"
        ))
    }
}

/// The last lines a server wrote to stderr, bounded and escaped.
#[derive(Clone, Default)]
struct LastWords {
    lines: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
    done: Arc<tokio::sync::Notify>,
    ended: Arc<std::sync::atomic::AtomicBool>,
}

impl LastWords {
    const LINES: usize = 5;
    const LINE_CHARS: usize = 300;

    /// Reads `stderr` to its end: each line to the debug log, the last few kept.
    async fn keep(self, server: String, stderr: tokio::process::ChildStderr) {
        let mut lines = BoundedLines::new(stderr, 64 * 1024);
        while let Ok(Some(line)) = lines.next_line().await {
            let text = match line {
                Line::Text(text) => text,
                Line::TooLong(head) => String::from_utf8_lossy(&head).into_owned(),
                other => format!("{other:?}"),
            };
            let shown =
                sandbox::proxy::shown(&text.chars().take(Self::LINE_CHARS).collect::<String>());
            tracing::debug!(server = %server, "upstream stderr: {shown}");
            if shown.trim().is_empty() {
                continue;
            }
            let mut kept = self.lines.lock().unwrap_or_else(|p| p.into_inner());
            if kept.len() == Self::LINES {
                kept.pop_front();
            }
            kept.push_back(shown);
        }
        self.ended.store(true, std::sync::atomic::Ordering::Release);
        self.done.notify_waiters();
    }

    /// The kept lines, once stderr has ended (or a moment has passed).
    async fn after_eof(&self) -> String {
        if !self.ended.load(std::sync::atomic::Ordering::Acquire) {
            let _ =
                tokio::time::timeout(std::time::Duration::from_millis(300), self.done.notified())
                    .await;
        }
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join(" | ")
    }
}

impl Drop for StdioChannel {
    fn drop(&mut self) {
        if let Some(pid) = self.child.get_mut().id() {
            // SAFETY: kill(2) with a negative pid signals the process group
            // this channel created; it touches no memory of ours.
            unsafe {
                libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
            }
        }
    }
}

struct Forget<'a> {
    pending: &'a Pending,
    id: Id,
    outbox: &'a mpsc::UnboundedSender<String>,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        let abandoned =
            self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id).is_some();
        if abandoned {
            // No answer will be read (a deadline passed, or the caller went
            // away): tell the server, so it can stop the work (MCP
            // `notifications/cancelled`). Its outcome stays unknown to us.
            let params = serde_json::json!({"requestId": self.id, "reason": "toolgate stopped waiting (deadline passed or caller gone)"});
            let _ = self.outbox.send(wire::notification("notifications/cancelled", &params));
        }
    }
}

fn route(
    server: &str,
    message: Message,
    pending: &Pending,
    inbox: &super::Inbox,
    replies: &mpsc::UnboundedSender<String>,
) {
    if message.is_response() {
        let Some(id) = message.id.clone() else { return };
        if let Some(tx) = pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id) {
            let _ = tx.send(Ok(message));
        }
        return;
    }
    match (&message.method, &message.id) {
        // Server-to-client requests: ping is answered; sampling, roots and
        // elicitation are not offered to upstreams, and say so rather than
        // leave the server waiting.
        (Some(method), Some(id)) => {
            let reply = if method == "ping" {
                wire::response(Some(id), &json!({}))
            } else {
                tracing::debug!(server, method, "upstream request refused");
                wire::error_response(
                    Some(id),
                    &wire::RpcError::new(
                        wire::code::METHOD_NOT_FOUND,
                        format!("{method} is not offered to upstream servers"),
                    ),
                )
            };
            let _ = replies.send(reply);
        }
        (Some(method), None) => inbox.deliver(method, message.params.as_deref()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stdio server sees PATH and what its config gives, never the rest of
    /// the gateway's environment (a caller's token, another server's key).
    #[tokio::test]
    async fn a_stdio_server_inherits_only_what_it_needs() {
        // SAFETY: this test's process (nextest runs one test a process) reads no variable meanwhile.
        unsafe { std::env::set_var("TOOLGATE_TEST_CALLER_TOKEN", "not-for-servers-0123456789") };
        let seen = std::env::temp_dir().join(format!("toolgate-stdio-env-{}", std::process::id()));
        let env =
            [("SEEN".to_string(), super::super::ValueSource::Value(seen.display().to_string()))]
                .into_iter()
                .collect();
        let (events, _) = tokio::sync::broadcast::channel(4);
        let (updates, _) = tokio::sync::broadcast::channel(4);
        let inbox = super::super::Inbox { events, updates, progress: Default::default() };
        let args = ["-c".to_string(), "env > \"$SEEN\"; sleep 5".to_string()];
        let transport = Transport::Stdio {
            command: "/bin/sh".into(),
            args: args.to_vec(),
            env,
            sandbox: Sandbox::Off,
        };
        let channel =
            StdioChannel::spawn("envtest", &transport, inbox, 1 << 20, Arc::default()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let text = loop {
            match std::fs::read_to_string(&seen) {
                Ok(t) if t.contains("SEEN=") => break t,
                _ if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await
                }
                _ => panic!("the server did not start"),
            }
        };
        drop(channel);
        let _ = std::fs::remove_file(&seen);
        assert!(text.lines().any(|l| l.starts_with("PATH=")), "{text}");
        assert!(
            !text.contains("TOOLGATE_TEST_CALLER_TOKEN") && !text.contains("not-for-servers"),
            "{text}"
        );
        for line in text.lines() {
            let name = line.split('=').next().unwrap();
            // sh sets PWD, SHLVL and `_` itself.
            assert!(
                INHERITED.contains(&name)
                    || sandbox::CA_VARIABLES.contains(&name)
                    || PASSED.contains(&name)
                    || ["SEEN", "PWD", "SHLVL", "_", "OLDPWD"].contains(&name),
                "{name} passed to a stdio server"
            );
        }
    }
}
