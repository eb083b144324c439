//! A stdio upstream: a child process speaking newline-delimited JSON-RPC on
//! its stdin/stdout. One reader task routes responses to their waiting
//! callers; the child's stderr goes to our log, never to our stdout.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use serde_json::json;
use tokio::sync::{Mutex, mpsc, oneshot, watch};

use super::UpstreamError;
use crate::lines::{BoundedLines, Line, id_in_head};
use crate::wire::{self, Id, Message};

/// A line longer than this is a misbehaving server, not a message.

/// Calls waiting for their answer: the message, or why it cannot be read.
type Pending = Arc<std::sync::Mutex<HashMap<Id, oneshot::Sender<Result<Message, UpstreamError>>>>>;

/// The gateway's variables a stdio server inherits: the official MCP SDKs'
/// default environment (`get_default_environment`, `getDefaultEnvironment`),
/// with the locale and the time zone. Anything else is given by `env`,
/// `env_env` or `env_file`.
pub const INHERITED: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"];

pub(crate) struct StdioChannel {
    /// Lines for the writer task, which owns the child's stdin.
    outbox: mpsc::UnboundedSender<String>,
    pending: Pending,
    next_id: AtomicI64,
    alive: watch::Receiver<bool>,
    _child: Mutex<Child>,
}

impl StdioChannel {
    pub(crate) fn spawn(
        server: &str,
        command: &str,
        args: &[String],
        env: &std::collections::BTreeMap<String, super::ValueSource>,
        inbox: super::Inbox,
        max_line: usize,
    ) -> Result<Self, UpstreamError> {
        let env = env.iter().map(|(k, source)| source.read(&format!("variable `{k}`")).map(|v| (k, v))).collect::<Result<Vec<_>, _>>()?;
        let mut child = Command::new(command)
            .args(args)
            // Not the gateway's whole environment: it holds callers' tokens
            // and other servers' credentials (`*_env`). What a process needs
            // to run, as the official SDKs pass it, and what the config gives.
            .env_clear()
            .envs(INHERITED.iter().filter_map(|k| std::env::var_os(k).map(|v| (*k, v))))
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group: wrappers such as `npx` start the real
            // server as a grandchild, which must go when the channel goes.
            .process_group(0)
            .spawn()
            .map_err(|e| UpstreamError::Unavailable(format!("cannot start `{command}`: {e}")))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let pending: Pending = Arc::default();
        let (alive_tx, alive) = watch::channel(true);

        let name = server.to_string();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(server = %name, "upstream stderr: {line}");
            }
        });

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
                        let waiting = id_in_head(&head).and_then(|id| routes.lock().unwrap_or_else(|p| p.into_inner()).remove(&Id::Number(id)));
                        if let Some(tx) = waiting {
                            let _ = tx.send(Err(UpstreamError::Protocol(format!("the upstream's answer exceeds [gateway] max_upstream_message_bytes ({max_line})"))));
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

        Ok(Self { outbox, pending, next_id: AtomicI64::new(1), alive, _child: Mutex::new(child) })
    }

    /// Whether the child is alive: flips to `false` once it exits (its stdout closed).
    pub(crate) fn closed(&self) -> watch::Receiver<bool> {
        self.alive.clone()
    }

    fn is_alive(&self) -> bool {
        *self.alive.borrow()
    }

    pub(crate) async fn request(&self, method: &str, params: &Value) -> Result<Message, UpstreamError> {
        if !self.is_alive() {
            return Err(UpstreamError::Unavailable("the upstream process has exited".into()));
        }
        let id = Id::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), tx);
        // Whether answered, failed or abandoned (a deadline, a caller gone),
        // the waiting entry goes with this call.
        let _forget = Forget { pending: &self.pending, id: id.clone(), outbox: &self.outbox };
        self.send_line(&wire::request(&id, method, params)).await?;
        // A dropped sender means the reader ended: the process is gone.
        rx.await.map_err(|_| UpstreamError::Lost("the upstream process exited".into()))?
    }

    pub(crate) async fn notify(&self, method: &str, params: &Value) -> Result<(), UpstreamError> {
        self.send_line(&wire::notification(method, params)).await
    }

    async fn send_line(&self, line: &str) -> Result<(), UpstreamError> {
        self.outbox
            .send(line.to_string())
            .map_err(|_| UpstreamError::Unavailable("the upstream process no longer reads its input".into()))
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

impl Drop for StdioChannel {
    fn drop(&mut self) {
        if let Some(pid) = self._child.get_mut().id() {
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
        let abandoned = self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id).is_some();
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
                wire::error_response(Some(id), &wire::RpcError::new(wire::code::METHOD_NOT_FOUND, format!("{method} is not offered to upstream servers")))
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
        let env = [("SEEN".to_string(), super::super::ValueSource::Value(seen.display().to_string()))].into_iter().collect();
        let (events, _) = tokio::sync::broadcast::channel(4);
        let (updates, _) = tokio::sync::broadcast::channel(4);
        let inbox = super::super::Inbox { events, updates, progress: Default::default() };
        let args = ["-c".to_string(), "env > \"$SEEN\"; sleep 5".to_string()];
        let channel = StdioChannel::spawn("envtest", "/bin/sh", &args, &env, inbox, 1 << 20).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let text = loop {
            match std::fs::read_to_string(&seen) {
                Ok(t) if t.contains("SEEN=") => break t,
                _ if std::time::Instant::now() < deadline => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                _ => panic!("the server did not start"),
            }
        };
        drop(channel);
        let _ = std::fs::remove_file(&seen);
        assert!(text.lines().any(|l| l.starts_with("PATH=")), "{text}");
        assert!(!text.contains("TOOLGATE_TEST_CALLER_TOKEN") && !text.contains("not-for-servers"), "{text}");
        for line in text.lines() {
            let name = line.split('=').next().unwrap();
            // sh sets PWD, SHLVL and `_` itself.
            assert!(INHERITED.contains(&name) || ["SEEN", "PWD", "SHLVL", "_", "OLDPWD"].contains(&name), "{name} passed to a stdio server");
        }
    }
}
