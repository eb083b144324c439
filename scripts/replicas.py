#!/usr/bin/env python3
"""Three toolgate replicas on one PostgreSQL ledger, behind a round-robin
proxy, under a stock MCP client's load; one replica is SIGKILLed mid-run and
restarted. Run it through `scripts/replicas`, which prepares the venv (the
official MCP Python SDK, mcp 2.3.0), PostgreSQL and the binary.

Usage: replicas.py --bin TOOLGATE [--short] [--keep] [--postgres URL]
  --short     CI's version: 20 s of load, 100 writes, 12 orders (else 60 s, 1000, 40)
  --keep      keep the temporary folder and the PostgreSQL schema
  --postgres  the base URL a fresh schema is made in (default: $TOOLGATE_TEST_POSTGRES,
              else postgres://postgres@127.0.0.1:5432/test)

What runs, all on loopback:
  - the Atlas support desk and parts server (`toolgate atlas …`), the upstreams;
  - replicas a, b, c (`toolgate serve`), each its own folder and state, one
    ledger (a schema of its own) and one requestState key;
  - a webhook receiver, told of every approval opened: it checks each
    notice's signature and answers 503 to the first attempt of every fourth
    delivery, so retries are exercised;
  - a round-robin proxy (this script again, `--serve-proxy`, in a process of
    its own so it does not share the load's interpreter lock): every HTTP
    request, not connection, goes to the next replica; a replica that refuses
    the connection (dead) is skipped; each answer names its replica in
    `X-Replica`.
The load, through the proxy in protocol era 2026-07-28: `flood` calls
search_customers from 6 tasks as fast as they can, up to ten times the
fleet's budget in all, against the rate budget;
`writer` makes keyed create_ticket calls (4 tasks, retried with the same key
until answered); `orderer` raises parts orders that need approval, each held
by the gateway until decided; `dana` decides them in the console, signed in
once, on whichever replica each request lands. At 40 % of the run, as soon
as replica b has a request in hand, it is SIGKILLed; 3 s later it is started
again on the same port and state.

Prints one line, e.g.
  3 replicas: rate held 1.04x; sessions served by 3 of 3; decision→answer p95 41 ms; notices 120 sent, 0 lost, 0 duplicated ids; writes 1000, 0 lost, 0 twice
and exits 0 only if: rate held ≤ 1.10x (admitted ÷ what one fleet-wide budget
admits in the run), every replica served the console session, p95 of
(order answered − its approval decided) ≤ 100 ms, every approval's notice
accepted by the webhook, no approval notified under two delivery ids, every
write answered with its ticket and dispatched upstream once; and, beside
the line, every order answered and every notice's signature good.
Otherwise it says on stderr which checks failed and keeps the folder and
the schema.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import ctypes
import hashlib
import hmac
import http.client
import http.server
import itertools
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx2  # the HTTP client the SDK brings: the console's browser here
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))
from sdk_client import leaf  # noqa: E402 - tests/python's helpers for the same SDK

# The clients talk to loopback only: no proxy from the environment between them.
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

ERA = "2026-07-28"
REPLICAS = ("a", "b", "c")
VICTIM = "b"
SEARCH = "support__search_customers"
CREATE = "support__create_ticket"
ORDER = "parts__raise_parts_order"
KEY_META = "io.toolgate/operationKey"
# The callers: name → (roles, token variable). Each is its own subject, so each has its own rate.
CALLERS = {
    "flood": ("agent", "TG_FLOOD_TOKEN"),
    "writer": ("agent", "TG_WRITER_TOKEN"),
    "orderer": ("agent", "TG_ORDERER_TOKEN"),
    "dana": ("approver", "TG_DANA_TOKEN"),
}
HOOK_SECRET_ENV = "TG_HOOK_SECRET"
HOLD_MS = 30_000
# The thresholds of "done".
MAX_RATE = 1.10
MAX_P95_MS = 100


@dataclass(frozen=True)
class Plan:
    """How big a run is."""

    seconds: float  # D: how long the flood runs; writes and orders are spread over it
    rate: int  # [budgets] rate_per_minute
    burst: int  # [budgets] rate_burst
    writes: int
    orders: int
    flooders: int = 6
    # The flood's calls a second, all tasks together: ten times what the
    # fleet's budget admits, far more than 3 replicas' separate budgets
    # would, yet bounded, so that on two cores the Python client and proxy
    # do not starve the replicas whose decision→answer time is measured.
    flood_factor: int = 10
    writers: int = 4
    kill_at: float = 0.4  # of D
    down_s: float = 3.0

    @staticmethod
    def of(short: bool) -> Plan:
        if short:
            return Plan(seconds=20, rate=600, burst=15, writes=100, orders=12)
        return Plan(seconds=60, rate=1200, burst=30, writes=1000, orders=40)


_started = time.monotonic()


def log(message: str) -> None:
    """Progress, on stderr (stdout carries the one result line)."""
    print(f"[{time.monotonic() - _started:6.1f}s] {message}", file=sys.stderr, flush=True)


class Failed(Exception):
    """The run could not be carried out (as opposed to a check that failed)."""


# ── Child processes ──────────────────────────────────────────────────────

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Should this script die without its `finally` (SIGKILL), the kernel
    # kills the children too. Only for children spawned from the main thread:
    # the signal follows the thread that forked.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Children:
    """Every process this run started, killed at the end whatever happens."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def spawn(self, argv: list[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent, **kw)
        self.procs.append(p)
        return p

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def free_port() -> int:
    """A port nobody listens on now (a replica keeps it across its restart)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_atlas(children: Children, binary: str, name: str, state: Path, log_path: Path) -> str:
    """`toolgate atlas NAME --http 127.0.0.1:0`: returns its /mcp URL, read
    from the line it prints; its stderr is copied to `log_path` from then on
    (so the pipe never fills)."""
    p = children.spawn([binary, "atlas", name, "--http", "127.0.0.1:0", "--state", str(state)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    found: dict[str, str] = {}
    ready = threading.Event()
    marker = re.compile(rf"toolgate-atlas: serving {name} on (http://\S+/mcp)")

    def pump() -> None:
        with open(log_path, "wb") as out:
            for line in p.stderr:
                out.write(line)
                out.flush()
                m = marker.search(line.decode(errors="replace"))
                if m and not ready.is_set():
                    found["url"] = m.group(1)
                    ready.set()
        ready.set()

    threading.Thread(target=pump, name=f"atlas-{name}-log", daemon=True).start()
    if not ready.wait(60) or "url" not in found:
        raise Failed(f"atlas {name} did not start:\n{tail(log_path)}")
    return found["url"]


def tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


# ── PostgreSQL ───────────────────────────────────────────────────────────


def psql(base: str, sql: str) -> str:
    out = subprocess.run(["psql", "-v", "ON_ERROR_STOP=1", "-q", "-X", "-At", base, "-c", sql], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise Failed(f"psql {base}: {sql}: {out.stderr.strip()}")
    return out.stdout


def ledger_url(base: str, schema: str) -> str:
    """The base URL with the schema as the connection's search_path."""
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}"


def ledger_approvals(base: str, schema: str) -> dict[str, dict]:
    """Every approval in the ledger: id → its arguments."""
    rows = psql(base, f"SELECT coalesce(json_agg(json_build_object('id', id, 'arguments', arguments::json)), '[]') FROM {schema}.approvals")
    return {a["id"]: a["arguments"] or {} for a in json.loads(rows)}


def ledger_waits(base: str, schema: str) -> list[int]:
    """Per approved order, from its approval's decision to its operation's
    end, as the ledger recorded them (ms): the gateway's share of
    decision→answer, without the proxy's and the client's. Diagnostics
    only: [] if the ledger's columns are not these."""
    try:
        rows = psql(base, f"SELECT o.updated_ms - a.decided_ms FROM {schema}.approvals a JOIN {schema}.operations o ON o.approval_id = a.id WHERE a.decided_ms IS NOT NULL")
    except Failed:
        return []
    return [int(r) for r in rows.split()]


# ── The replicas ─────────────────────────────────────────────────────────


def gateway_config(port: int, ledger: str, hook_url: str, parts: str, support: str, plan: Plan) -> str:
    """A replica's toolgate.toml: soak.rs's registry, the shared ledger,
    the fleet's rate, the approvals' webhook and the four callers."""
    callers = "".join(
        f'[callers.{name}]\ntenant = "atlas"\nroles = ["{role}"]\ntoken_env = "{env}"\n' for name, (role, env) in CALLERS.items()
    )
    return f"""[gateway]
listen = "127.0.0.1:{port}"
state_dir = "state"
ledger = "{ledger}"
upstream_timeout_ms = 5000

# One budget for the fleet: a caller's rate holds whichever replica it lands on.
[budgets]
rate_per_minute = {plan.rate}
rate_burst = {plan.burst}

[approvals]
hold_ms = {HOLD_MS}
# Only the fallback: a decision must wake the held call on every replica at once.
poll_ms = 2000

[[approvals.notify.webhooks]]
name = "replicas"
url = "{hook_url}"
secret_env = "{HOOK_SECRET_ENV}"
attempts = 8

[servers.parts]
url = "{parts}"
[servers.support]
url = "{support}"

[registry."parts__find_part"]
class = "automatic"
read_only = true
[registry."parts__check_availability"]
class = "automatic"
read_only = true
[registry."parts__raise_parts_order"]
class = "requires_approval"
[registry."support__search_customers"]
class = "automatic"
read_only = true
[registry."support__get_ticket"]
class = "automatic"
read_only = true
[registry."support__create_ticket"]
class = "automatic"
[registry."support__create_ticket".reconcile]
tool = "get_ticket"
arguments = {{ client_reference = "client_reference" }}
found = "/found"

{callers}"""


class Gateway:
    """One replica: its folder, its fixed port, its process (restartable)."""

    MARKER = "toolgate: serving MCP on"

    def __init__(self, name: str, folder: Path, binary: str, env: dict[str, str]) -> None:
        self.name = name
        self.folder = folder
        self.config = folder / "toolgate.toml"
        self.log = folder.parent / f"{name}.log"
        self.binary = binary
        self.env = env
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._log_from = 0

    def spawn(self, children: Children) -> None:
        """Starts `toolgate serve`, its output appended to its log."""
        self._log_from = self.log.stat().st_size if self.log.exists() else 0
        out = open(self.log, "ab")
        self.proc = children.spawn([self.binary, "serve", "--config", str(self.config)], env=self.env, cwd=self.folder, stdout=out, stderr=subprocess.STDOUT)
        out.close()

    def listening(self) -> bool:
        """Whether this start printed its address yet; raises if it exited."""
        with open(self.log, "rb") as f:
            f.seek(self._log_from)
            text = f.read().decode(errors="replace")
        # Complete lines only: a line may reach the file in several writes.
        for line in text[: text.rfind("\n") + 1].splitlines():
            if self.MARKER in line:
                if f"127.0.0.1:{self.port}/mcp" not in line:
                    raise Failed(f"replica {self.name} serves elsewhere than port {self.port}: {line}")
                return True
        if self.proc.poll() is not None:
            raise Failed(f"replica {self.name} exited ({self.proc.returncode}) before it served:\n{text[-3000:]}")
        return False

    def start(self, children: Children, timeout: float = 60) -> None:
        self.spawn(children)
        deadline = time.monotonic() + timeout
        while not self.listening():
            if time.monotonic() > deadline:
                raise Failed(f"replica {self.name} did not serve within {timeout:.0f} s:\n{tail(self.log)}")
            time.sleep(0.02)

    async def restart(self, children: Children, timeout: float = 60) -> None:
        """Starts it again (from the event loop's thread, so its parent-death
        signal follows a thread that lives) and waits until it serves."""
        deadline = time.monotonic() + timeout
        self.spawn(children)
        while True:
            try:
                if self.listening():
                    return
            except Failed:
                # Its port may not be free again yet (the kernel still holds
                # the dead listener's): try again, on the same port.
                if time.monotonic() > deadline or "cannot listen" not in tail(self.log, 5):
                    raise
                await asyncio.sleep(0.25)
                self.spawn(children)
            if time.monotonic() > deadline:
                raise Failed(f"replica {self.name} did not serve again within {timeout:.0f} s:\n{tail(self.log)}")
            await asyncio.sleep(0.02)

    def sigkill(self) -> None:
        if self.proc.poll() is not None:
            raise Failed(f"replica {self.name} had exited on its own ({self.proc.returncode}) before the kill:\n{tail(self.log)}")
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def share_request_state_key(source: Path, replica: Path) -> None:
    """Replicas must share the key that seals requestState: a copy of a's,
    owner-only as the gateway demands (state dir 0700, key 0600)."""
    state = replica / "state"
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(state, 0o700)
    shutil.copyfile(source / "state" / "requeststate.key", state / "requeststate.key")
    os.chmod(state / "requeststate.key", 0o600)


def check_config(binary: str, config: Path, env: dict[str, str]) -> None:
    out = subprocess.run([binary, "config", "check", str(config)], env=env, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise Failed(f"`toolgate config check {config}` refused it:\n{out.stdout}{out.stderr}")


# ── The webhook receiver ─────────────────────────────────────────────────


class Hooks:
    """Receives the approvals' notices: checks each signature, records
    every attempt, refuses (503) the first attempt of every fourth delivery."""

    def __init__(self, secret: str) -> None:
        self.secret = secret.encode()
        self.lock = threading.Lock()
        self.attempts: list[dict] = []  # every request: delivery, approval, justification, status
        self.ordinal: dict[str, int] = {}  # delivery id → 1, 2, … in order of first arrival
        self.bad_signatures = 0
        hooks = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as the proxy's, below

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = hooks.receive(self.path, self.headers, body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, name="hooks", daemon=True).start()

    def signed(self, header: str, body: bytes) -> bool:
        """`t=<ms>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`, the time fresh."""
        fields = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
        t, v1 = fields.get("t", ""), fields.get("v1", "")
        if not t.isdigit() or abs(int(t) - time.time() * 1000) > 300_000:
            return False
        want = hmac.new(self.secret, t.encode() + b"." + body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(want, v1)

    def receive(self, path: str, headers, body: bytes) -> int:
        if path != "/hook":
            return 404
        if not self.signed(headers.get("Toolgate-Signature", ""), body):
            with self.lock:
                self.bad_signatures += 1
            return 401
        delivery = headers.get("Toolgate-Delivery", "")
        try:
            approval = json.loads(body)["approval"]
        except (ValueError, KeyError, TypeError):
            return 400
        with self.lock:
            first = delivery not in self.ordinal
            if first:
                self.ordinal[delivery] = len(self.ordinal) + 1
            # The first attempt of every fourth delivery fails: the sender must retry it.
            status = 503 if first and self.ordinal[delivery] % 4 == 0 else 200
            self.attempts.append({
                "delivery": delivery,
                "approval": approval.get("id"),
                "justification": (approval.get("arguments") or {}).get("justification"),
                "status": status,
            })
        return status

    def accepted(self) -> set[str]:
        """The approvals some notice of which was accepted."""
        with self.lock:
            return {a["approval"] for a in self.attempts if a["status"] == 200}

    def delivery_ids(self) -> dict[str, set[str]]:
        """Approval → the delivery ids it arrived under (any attempt)."""
        out: dict[str, set[str]] = collections.defaultdict(set)
        with self.lock:
            for a in self.attempts:
                out[a["approval"]].add(a["delivery"])
        return out

    def justifications(self) -> dict[str, str]:
        with self.lock:
            return {a["approval"]: a["justification"] for a in self.attempts if a["justification"]}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ── The round-robin proxy (its own process: `--serve-proxy`) ────────────

# Hop-by-hop headers (RFC 9110 §7.6.1) and the framing the proxy redoes itself.
HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "content-length"}
COUNTS_PATH = "/__proxy/counts"
BUSY_PATH = "/__proxy/busy"


def serve_proxy(backends: list[tuple[str, str, int]]) -> None:
    """Serves until killed: each request goes to the next backend in turn
    (one that refuses the connection is skipped; one that fails after the
    request was sent is not retried, as a write may have reached it), its
    answer streamed back as it arrives, with `X-Replica`. Prints
    `proxy: serving on ADDR` when ready. Its own two paths: GET
    /__proxy/counts says how many answers each backend gave; GET
    /__proxy/busy?replica=NAME&timeout_ms=N answers once NAME has a request
    in hand (or N ms passed), so the harness can kill it mid-request."""
    turn = itertools.count()
    counts = collections.Counter()  # answers relayed, per backend
    inflight = collections.Counter()  # requests sent to a backend and not yet answered whole
    lock = threading.Condition()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes: with Nagle's algorithm
        # the body would wait for the client's delayed ACK (40 ms on Linux).
        disable_nagle_algorithm = True

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == COUNTS_PATH:
                with lock:
                    answers = json.dumps(counts)
                self.plain(200, answers)
                return
            if self.path.startswith(BUSY_PATH + "?"):
                # Waits (at most timeout_ms) until the backend has a request in hand.
                q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
                name, timeout = q["replica"][0], int(q["timeout_ms"][0]) / 1000
                with lock:
                    lock.wait_for(lambda: inflight[name] > 0, timeout)
                    n = inflight[name]
                self.plain(200, json.dumps({"in_flight": n}))
                return
            self.forward()

        do_POST = do_DELETE = do_PUT = do_PATCH = do_HEAD = do_OPTIONS = lambda self: self.forward()

        def plain(self, status: int, text: str) -> None:
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")  # so the client does not reuse it
            self.end_headers()
            self.wfile.write(data)

        def request_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def forward(self) -> None:
            body = self.request_body()
            headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP]
            first = next(turn)
            for i in range(len(backends)):
                name, host, port = backends[(first + i) % len(backends)]
                upstream = http.client.HTTPConnection(host, port, timeout=120)
                try:
                    upstream.connect()
                except OSError:
                    upstream.close()
                    continue  # down: the request never reached it, the next one gets it
                try:
                    # Host as the client sent it (the proxy's address, a loopback host).
                    upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for k, v in headers:
                        upstream.putheader(k, v)
                    if body or self.command in ("POST", "PUT", "PATCH"):
                        upstream.putheader("Content-Length", str(len(body)))
                    upstream.endheaders(body or None)
                except (OSError, http.client.HTTPException) as e:
                    upstream.close()
                    self.close_connection = True
                    self.plain(502, f"replica {name} failed while the request was sent: {e}")
                    return
                with lock:
                    inflight[name] += 1
                    lock.notify_all()
                try:
                    try:
                        answer = upstream.getresponse()
                    except (OSError, http.client.HTTPException) as e:
                        self.close_connection = True
                        self.plain(502, f"replica {name} failed after the request was sent: {e}")
                        return
                    self.relay(name, answer)
                finally:
                    upstream.close()
                    with lock:
                        inflight[name] -= 1
                return
            self.close_connection = True
            self.plain(503, "no replica accepts connections")

        def relay(self, name: str, answer: http.client.HTTPResponse) -> None:
            with lock:
                counts[name] += 1
            self.send_response_only(answer.status, answer.reason)
            for k, v in answer.getheaders():
                if k.lower() not in HOP:
                    self.send_header(k, v)
            self.send_header("X-Replica", name)
            length = answer.getheader("Content-Length")
            bodiless = self.command == "HEAD" or answer.status in (204, 304) or 100 <= answer.status < 200
            if bodiless:
                self.send_header("Content-Length", length or "0")
                self.end_headers()
                return
            if length is not None:
                self.send_header("Content-Length", length)
            else:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent = 0
            try:
                # read1: whatever has arrived, at once (an SSE event is passed on as it comes).
                while chunk := answer.read1(65536):
                    sent += len(chunk)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if length is None else chunk)
                    self.wfile.flush()
                complete = length is None or sent == int(length)
            except (OSError, http.client.HTTPException):
                complete = False
            if not complete:
                # The replica died mid-answer: cut the client's connection
                # too, so it sees a broken answer rather than a short one.
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            if length is None:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 256

    server = Server(("127.0.0.1", 0), Handler)
    print(f"proxy: serving on 127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


def start_proxy(children: Children, gateways: list[Gateway], log_path: Path) -> str:
    """The proxy process; returns its base URL."""
    spec = [f"{g.name}=127.0.0.1:{g.port}" for g in gateways]
    err = open(log_path, "wb")
    p = children.spawn([sys.executable, str(Path(__file__).resolve()), "--serve-proxy", *spec], stdout=subprocess.PIPE, stderr=err)
    err.close()
    line = p.stdout.readline().decode()
    if not line.startswith("proxy: serving on "):
        raise Failed(f"the proxy did not start: {line!r}\n{tail(log_path)}")
    return "http://" + line.split()[-1]


def proxy_get(base: str, path: str) -> dict:
    """One of the proxy's own answers (not forwarded)."""
    u = urllib.parse.urlparse(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        c.request("GET", path)
        return json.loads(c.getresponse().read())
    finally:
        c.close()


# ── The load ─────────────────────────────────────────────────────────────


@dataclass
class Order:
    """One order, by the justification that makes it a call of its own."""

    justification: str
    answered_at: float | None = None  # time.monotonic() when its (approved) answer arrived
    outcome: str = "unanswered"
    attempts: int = 0


@dataclass
class Run:
    """What the load saw, and when."""

    plan: Plan
    url: str  # the proxy's /mcp
    base: str  # the proxy's base, for the console
    tokens: dict[str, str]
    run_id: str
    t0: float = 0.0
    flood_admitted: int = 0
    flood_limited: int = 0
    flood_cut: int = 0  # calls that did not come back (a replica died): retried, not counted
    flood_reasons: collections.Counter = field(default_factory=collections.Counter)
    write_args: dict[str, dict] = field(default_factory=dict)  # key → its arguments, the same on every retry
    writes: dict[str, str] = field(default_factory=dict)  # key → "ticket SUP-…" or what ended it
    write_tickets: dict[str, str] = field(default_factory=dict)  # key → ticket id answered
    write_cuts: int = 0
    write_retries: collections.Counter = field(default_factory=collections.Counter)  # reason → retries
    unknown: list[str] = field(default_factory=list)  # keys answered `reconcile`, asked again at the end
    orders: dict[str, Order] = field(default_factory=dict)
    decided_at: dict[str, float] = field(default_factory=dict)  # approval id → right after the POST answered
    console: collections.Counter = field(default_factory=collections.Counter)  # (replica, signed in) → requests
    victim_back: bool = False  # the killed replica serves again
    console_victim_back: collections.Counter = field(default_factory=collections.Counter)  # signed in → its requests since
    console_errors: collections.Counter = field(default_factory=collections.Counter)
    signins: collections.Counter = field(default_factory=collections.Counter)  # replica → sign-in requests
    client_breaks: collections.Counter = field(default_factory=collections.Counter)  # clients whose transport broke
    events: list[str] = field(default_factory=list)
    orders_done: asyncio.Event = field(default_factory=asyncio.Event)

    def at(self, fraction: float) -> float:
        return self.t0 + fraction * self.plan.seconds

    async def until(self, when: float) -> None:
        delay = when - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)


def reason_of(result) -> tuple[str | None, str | None, int | None]:
    """A refusal's (reason, action, retry_after_ms); Nones for a success."""
    if not result.is_error:
        return None, None, None
    sc = result.structured_content if isinstance(result.structured_content, dict) else {}
    return sc.get("reason") or "tool_error", sc.get("action"), sc.get("retry_after_ms")


class Cut(Exception):
    """A call that did not come back: the replica died under it (the proxy
    answered 502, or cut the answer), or no answer in time. Retried."""


async def with_client(run: Run, caller: str, body):
    """`await body(client)` in a stock SDK client of `caller` through the
    proxy, again in a fresh client whenever the transport itself broke
    (the SDK raises that at the client's exit) until `body` returns. Each
    body keeps its progress outside, so it goes on where it stopped."""
    while True:
        http_client = create_mcp_http_client(headers={"Authorization": f"Bearer {run.tokens[caller]}"})
        try:
            async with Client(streamable_http_client(run.url, http_client=http_client), mode=ERA) as client:
                return await body(client)
        except Failed:
            raise
        except Exception as e:  # noqa: BLE001 - the transport failed: a new client
            e = leaf(e)
            run.client_breaks[f"{caller}: {type(e).__name__}"] += 1
            await asyncio.sleep(0.1)
        finally:
            await http_client.aclose()


async def call(client, name: str, arguments: dict, meta: dict | None = None, timeout: float = 60):
    """One stock `call_tool`; raises `Cut` when it did not come back."""
    try:
        with anyio.fail_after(timeout):
            return await client.call_tool(name, arguments, meta=meta)
    except MCPError as e:
        raise Cut(f"MCP error {e.code}: {e.error.message}") from None
    except TimeoutError:
        raise Cut(f"no answer in {timeout:.0f} s") from None


async def find_customer(run: Run) -> str:
    """A real customer_id, found the way an agent finds one."""
    deadline = time.monotonic() + 30

    async def body(client):
        while True:
            try:
                result = await call(client, SEARCH, {"query": "Harbor Freight"})
            except Cut as e:
                if time.monotonic() > deadline:
                    raise Failed(f"search_customers does not answer through the proxy: {e}") from None
                await asyncio.sleep(0.2)
                continue
            reason, action, _ = reason_of(result)
            if reason is None and result.structured_content.get("customers"):
                return result.structured_content["customers"][0]["customer_id"]
            if action != "retry" or time.monotonic() > deadline:
                raise Failed(f"search_customers did not find the customer: {result.structured_content}")
            await asyncio.sleep(0.2)

    return await with_client(run, "writer", body)


async def flood(run: Run) -> None:
    """search_customers until D, as fast as it answers up to this task's
    share of `flood_factor` × the budget: admitted = not `rate_limited`."""
    end = run.at(1.0)
    interval = run.plan.flooders / (run.plan.flood_factor * run.plan.rate / 60)
    slot = [time.monotonic()]

    async def body(client):
        while time.monotonic() < end:
            slot[0] = max(slot[0] + interval, time.monotonic() - interval)  # no bursts to catch up
            await run.until(slot[0])
            try:
                result = await call(client, SEARCH, {"query": "Harbor"}, timeout=30)
            except Cut:
                run.flood_cut += 1
                await asyncio.sleep(0.02)
                continue
            reason, _, _ = reason_of(result)
            if reason == "rate_limited":
                run.flood_limited += 1
            else:
                run.flood_admitted += 1
                run.flood_reasons[reason or "answered"] += 1

    await with_client(run, "flood", body)


def write_key(run: Run, i: int) -> str:
    return f"replicas-{run.run_id}-{i:05d}"


async def writer(run: Run, slots, customer: str) -> None:
    """Keyed create_ticket calls, each paced to its slot in the run, each
    asked again (same key, same arguments) until it has a final answer."""
    spacing = 0.9 * run.plan.seconds / run.plan.writes
    current: list[str] = []  # the key in hand, kept across a new client

    async def body(client):
        while True:
            if not current:
                i = next(slots, None)
                if i is None:
                    return
                await run.until(run.t0 + i * spacing)
                key = write_key(run, i)
                run.write_args[key] = {"customer_id": customer, "subject": f"replicas run {run.run_id} write {i}", "priority": "normal", "client_reference": key}
                current.append(key)
            status = await write_once(run, client, current[0])
            if status == "unknown":
                run.unknown.append(current[0])
            if status != "again":
                current.clear()

    await with_client(run, "writer", body)


async def write_once(run: Run, client, key: str) -> str:
    """One attempt at write `key`: "done" (its final answer recorded),
    "again" (retry it) or "unknown" (refused with `reconcile`)."""
    try:
        result = await call(client, CREATE, run.write_args[key], meta={KEY_META: key})
    except Cut:
        run.write_cuts += 1
        await asyncio.sleep(0.05)
        return "again"
    reason, action, retry_after_ms = reason_of(result)
    if reason is None:
        # The tool's own result, or a reconciler's evidence replayed.
        sc = result.structured_content if isinstance(result.structured_content, dict) else {}
        ticket = sc.get("ticket_id") or ((sc.get("evidence") or {}).get("ticket") or {}).get("ticket_id")
        run.writes[key] = f"ticket {ticket}" if ticket else "answered without a ticket"
        if ticket:
            run.write_tickets[key] = ticket
        return "done"
    if action == "retry":
        run.write_retries[reason] += 1
        await asyncio.sleep(min(retry_after_ms or 100, 2000) / 1000)
        return "again"
    run.writes[key] = f"refused {reason} ({action})"
    return "unknown" if action == "reconcile" else "done"


async def settle_unknown(run: Run, seconds: float) -> None:
    """Writes left unknown (a replica died with them in flight) are asked
    again for a while: a fleet that settles them answers their keys."""
    if not run.unknown:
        return
    log(f"writer: {len(run.unknown)} writes unknown; asking again for up to {seconds:.0f} s")
    deadline = time.monotonic() + seconds

    async def body(client):
        while run.unknown and time.monotonic() < deadline:
            for key in list(run.unknown):
                if await write_once(run, client, key) == "done":
                    run.unknown.remove(key)
            await asyncio.sleep(0.5)

    await with_client(run, "writer", body)


async def order(run: Run, i: int, deadline: float) -> None:
    """One raise_parts_order, held by the gateway until decided; asked again
    (the same call: it finds the same approval) whenever it came back
    without a decision or did not come back at all."""
    justification = f"replicas run {run.run_id} order {i}"
    o = run.orders[justification] = Order(justification)
    await run.until(run.t0 + (i + 0.5) * 0.85 * run.plan.seconds / run.plan.orders)
    args = {"part_no": "AC250-TV-2303", "quantity": 2, "ticket_id": "SR-22422", "justification": justification}

    async def body(client):
        # The tools first, as an agent lists them: the SDK checks a result
        # against its tool's outputSchema and, for a tool it has not listed,
        # lists the tools only after the answer came, which would count here.
        with contextlib.suppress(MCPError):
            await client.list_tools()
        while time.monotonic() < deadline:
            o.attempts += 1
            try:
                result = await call(client, ORDER, args, timeout=min(HOLD_MS / 1000 + 15, max(1.0, deadline - time.monotonic())))
            except Cut:
                await asyncio.sleep(0.05)
                continue
            reason, action, retry_after_ms = reason_of(result)
            if reason is None:
                o.answered_at = time.monotonic()
                o.outcome = "ordered"
                return
            if reason == "approval_pending" or action == "retry":
                await asyncio.sleep(min(retry_after_ms or 50, 2000) / 1000)
                continue
            o.outcome = f"refused {reason}"
            return
        o.outcome = "unanswered by the deadline"

    await with_client(run, "orderer", body)


# The console's pages, as toolgate-console renders them.
SIGNIN_FORM = re.compile(r'name="form" value="([^"]+)"')
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
APPROVAL_LINK = re.compile(r'href="/console/approvals/(apr_[0-9a-f]+)"')
SIGNED_IN_PAGE = 'action="/console/signout"'  # the frame of every signed-in page
PENDING_END = 'id="history-h"'  # the inbox: pending cards, then the decided history
MAX_AGE_0 = re.compile(r"(?i);\s*max-age=0\s*(;|$)")  # a cookie cleared


class Console:
    """Dana in the console through the proxy: a browser's cookie jar, no
    JavaScript; each answer's replica and whether it was signed in counted."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.http = httpx2.AsyncClient(base_url=run.base, timeout=15, trust_env=False, follow_redirects=False)
        self.jar: dict[str, str] = {}

    async def request(self, method: str, path: str, form: dict | None = None, signing_in: bool = False):
        """One request; None when no replica answered it. Each answer counts
        for its replica, signed in or not (sign-in itself apart)."""
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.jar.items())} if self.jar else {}
        try:
            if form is None:
                r = await self.http.request(method, path, headers=headers)
            else:
                headers["Content-Type"] = "application/x-www-form-urlencoded"
                r = await self.http.request(method, path, headers=headers, content=urllib.parse.urlencode(form))
        except Exception as e:  # noqa: BLE001 - a replica died under it: the next poll tries again
            self.run.console_errors[type(e).__name__] += 1
            return None
        self.http.cookies.clear()  # the jar here is the one that counts
        for c in r.headers.get_list("set-cookie"):
            name, _, rest = c.partition("=")
            value = rest.split(";", 1)[0]
            if MAX_AGE_0.search(c) or not value:
                self.jar.pop(name.strip(), None)
            else:
                self.jar[name.strip()] = value
        replica = r.headers.get("x-replica")
        if replica is None:
            self.run.console_errors[f"HTTP {r.status_code} from the proxy"] += 1
            return None
        if signing_in:
            self.run.signins[replica] += 1
        else:
            self.run.console[(replica, self.signed_in(r))] += 1
            if replica == VICTIM and self.run.victim_back:
                self.run.console_victim_back[self.signed_in(r)] += 1
        return r

    @staticmethod
    def signed_in(r) -> bool:
        """Served in the session: a page in the signed-in frame, or a
        redirect anywhere but the sign-in form (after a decision)."""
        if r.status_code in (302, 303):
            return not r.headers.get("location", "").startswith("/console/signin")
        return SIGNED_IN_PAGE in r.text

    async def sign_in(self, deadline: float) -> None:
        """Once, as a person does; never again, so every later page served
        signed in shows that replica honoured a session another one opened."""
        while time.monotonic() < deadline:
            r = await self.request("GET", "/console/signin", signing_in=True)
            m = SIGNIN_FORM.search(r.text) if r is not None else None
            if m:
                r = await self.request("POST", "/console/signin", {"token": self.run.tokens["dana"], "form": m.group(1)}, signing_in=True)
                if r is not None and r.status_code == 303 and "toolgate_session" in self.jar:
                    log(f"dana: signed in on replica {r.headers['x-replica']}")
                    return
                log(f"dana: sign-in refused ({None if r is None else r.status_code}); again")
            await asyncio.sleep(0.2)
        raise Failed("dana could not sign in to the console")

    async def decide(self, approval: str) -> None:
        """Opens the approval, approves it with the page's CSRF token."""
        page = await self.request("GET", f"/console/approvals/{approval}")
        if page is None or page.status_code != 200 or not self.signed_in(page):
            return
        if 'name="ruling"' not in page.text:
            return  # decided already (or not for dana): nothing to do
        m = CSRF.search(page.text)
        if not m:
            return
        r = await self.request("POST", f"/console/approvals/{approval}", {"csrf": m.group(1), "ruling": "approve", "reason": "replicas"})
        if r is not None and r.status_code == 303 and "decided=1" in r.headers.get("location", ""):
            self.run.decided_at[approval] = time.monotonic()

    async def approve_all(self, until: asyncio.Event, deadline: float) -> None:
        """Polls the inbox every 50 ms and approves what waits."""
        await self.sign_in(deadline)
        while not until.is_set() and time.monotonic() < deadline:
            r = await self.request("GET", "/console/approvals")
            if r is not None and r.status_code == 200 and self.signed_in(r):
                pending = r.text.split(PENDING_END, 1)[0]
                for approval in dict.fromkeys(APPROVAL_LINK.findall(pending)):
                    if approval not in self.run.decided_at:
                        await self.decide(approval)
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        await self.http.aclose()


async def chaos(run: Run, victim: Gateway, children: Children) -> None:
    """SIGKILL the victim at 40 % of the run, once it has a request in hand
    (so the kill cuts calls, not an idle process); start it again 3 s later."""
    await run.until(run.at(run.plan.kill_at))
    busy = await asyncio.to_thread(proxy_get, run.base, f"{BUSY_PATH}?replica={victim.name}&timeout_ms=2000")
    victim.sigkill()
    log(f"replica {victim.name}: SIGKILLed with {busy['in_flight']} requests in hand")
    run.events.append(f"{victim.name} killed at {time.monotonic() - run.t0:.1f} s with {busy['in_flight']} requests in hand")
    await asyncio.sleep(run.plan.down_s)
    started = time.monotonic()
    await victim.restart(children)
    log(f"replica {victim.name}: serving again on port {victim.port} ({time.monotonic() - started:.1f} s to start)")
    run.events.append(f"{victim.name} back at {time.monotonic() - run.t0:.1f} s")
    run.victim_back = True


async def load(run: Run, gateways: dict[str, Gateway], children: Children) -> None:
    """Everything at once, each part ending by itself."""
    plan = run.plan
    customer = await find_customer(run)
    log(f"load: {plan.seconds:.0f} s; flood ×{plan.flooders}, {plan.writes} writes ×{plan.writers}, {plan.orders} orders; customer {customer}")
    console = Console(run)
    run.t0 = time.monotonic()
    orders_deadline = run.at(1.0) + 20  # a held order gets this long after the flood to be answered
    slots = iter(range(plan.writes))
    try:
        flooders = [asyncio.create_task(flood(run)) for _ in range(plan.flooders)]
        writers = [asyncio.create_task(writer(run, slots, customer)) for _ in range(plan.writers)]
        orders = [asyncio.create_task(order(run, i, orders_deadline)) for i in range(plan.orders)]
        approver = asyncio.create_task(console.approve_all(run.orders_done, orders_deadline + 5))
        killer = asyncio.create_task(chaos(run, gateways[VICTIM], children))
        await asyncio.gather(*flooders)
        log(f"flood: done ({run.flood_admitted} admitted, {run.flood_limited} rate_limited, {run.flood_cut} cut)")
        await killer
        await asyncio.gather(*orders)
        run.orders_done.set()
        await approver
        # Writes are paced over 90 % of the run; they get a minute more to finish.
        done, slow = await asyncio.wait(writers, timeout=max(1.0, run.at(1.0) + 60 - time.monotonic()))
        for t in slow:
            t.cancel()
        for t in done:
            t.result()
        await settle_unknown(run, 20)
        log(f"load: done after {time.monotonic() - run.t0:.1f} s")
    finally:
        await console.close()


# ── The verdict ──────────────────────────────────────────────────────────


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def p95(values: list[float]) -> float | None:
    """Nearest-rank 95th percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def spread(values: list[float]) -> str:
    """min/median/p95/max, for the details."""
    if not values:
        return "n/a"
    ordered = sorted(values)
    return "min/median/p95/max " + "/".join(f"{v:.0f}" for v in (ordered[0], ordered[len(ordered) // 2], p95(ordered), ordered[-1]))


async def wait_for_notices(hooks: Hooks, base: str, schema: str, timeout: float) -> dict[str, dict]:
    """Waits until every approval in the ledger had a notice accepted (or
    the timeout); returns the ledger's approvals."""
    deadline = time.monotonic() + timeout
    while True:
        approvals = ledger_approvals(base, schema)
        missing = set(approvals) - hooks.accepted()
        if not missing or time.monotonic() > deadline:
            return approvals
        await asyncio.sleep(0.5)


def verdict(run: Run, hooks: Hooks, approvals: dict[str, dict], folder: Path, gateway_waits: list[int]) -> tuple[str, list[str]]:
    """The one line, and the checks that failed."""
    plan = run.plan
    failed = []

    allowed = plan.rate * plan.seconds / 60 + plan.burst
    rate = run.flood_admitted / allowed
    if rate > MAX_RATE:
        failed.append(f"rate held {rate:.2f}x > {MAX_RATE:.2f}x: {run.flood_admitted} flood calls admitted, one budget admits {allowed:.0f} in {plan.seconds:.0f} s")

    signed = {replica for (replica, ok), n in run.console.items() if ok and n}
    if len(signed) < len(REPLICAS):
        failed.append(f"sessions served by {len(signed)} of {len(REPLICAS)}: {sorted(signed)} served dana's session; console answers {dict(run.console)}")

    # decision → answer, per approved order: its approval by the justification it carries.
    by_justification: dict[str, list[str]] = collections.defaultdict(list)
    for approval, justification in {**{a: args.get("justification") for a, args in approvals.items()}, **hooks.justifications()}.items():
        if justification:
            by_justification[justification].append(approval)
    waits, undecided = [], []
    for o in run.orders.values():
        if o.answered_at is None:
            continue
        decided = [run.decided_at[a] for a in by_justification.get(o.justification, []) if a in run.decided_at]
        if decided:
            waits.append((o.answered_at - min(decided)) * 1000)
        else:
            undecided.append(o.justification)
    latency = p95(waits)
    unanswered = [o for o in run.orders.values() if o.answered_at is None]
    if latency is None or latency > MAX_P95_MS:
        failed.append(f"decision→answer p95 {'n/a' if latency is None else f'{latency:.0f} ms'} (≤ {MAX_P95_MS} ms wanted) over {len(waits)} orders")
    if unanswered:
        outcomes = collections.Counter(o.outcome for o in unanswered)
        failed.append(f"{len(unanswered)} of {len(run.orders)} orders not answered approved: {dict(outcomes)}")

    accepted = hooks.accepted()
    lost = sorted(set(approvals) - accepted)
    ids = hooks.delivery_ids()
    duplicated = sorted(a for a in approvals if len(ids.get(a, ())) > 1)
    if lost:
        failed.append(f"notices lost: {len(lost)} approvals never accepted by the webhook, e.g. {lost[:3]}")
    if duplicated:
        failed.append(f"notices duplicated: {len(duplicated)} approvals arrived under several delivery ids, e.g. {duplicated[:3]}")
    if hooks.bad_signatures:
        failed.append(f"{hooks.bad_signatures} notices with a bad signature")
    if not approvals:
        failed.append("no approval was opened")

    tickets = collections.defaultdict(list)
    for t in read_jsonl(folder / "support" / "support-tickets.jsonl"):
        tickets[t.get("client_reference")].append(t.get("ticket_id"))
    dispatches = collections.Counter(c.get("client_reference") for c in read_jsonl(folder / "support" / "support-calls.jsonl"))
    keys = [write_key(run, i) for i in range(plan.writes)]
    lost_writes = [k for k in keys if k not in run.write_tickets or run.write_tickets[k] not in tickets.get(k, [])]
    twice = [k for k, n in dispatches.items() if n > 1]
    if lost_writes:
        outcomes = collections.Counter(run.writes.get(k, "never answered").split(" SUP-")[0] for k in lost_writes)
        failed.append(f"writes lost: {len(lost_writes)}: {dict(outcomes)}")
    if twice:
        failed.append(f"writes dispatched twice: {len(twice)}, e.g. {twice[:3]}")

    line = (
        f"{len(REPLICAS)} replicas: rate held {rate:.2f}x; sessions served by {len(signed)} of {len(REPLICAS)}; "
        f"decision→answer p95 {'n/a' if latency is None else f'{latency:.0f} ms'}; "
        f"notices {len(approvals)} sent, {len(lost)} lost, {len(duplicated)} duplicated ids; "
        f"writes {plan.writes}, {len(lost_writes)} lost, {len(twice)} twice"
    )
    log(
        f"details: flood {run.flood_admitted} admitted ({dict(run.flood_reasons)}), {run.flood_limited} rate_limited, {run.flood_cut} cut; "
        f"writes {dict(collections.Counter(v.split(' SUP-')[0] for v in run.writes.values()))}, {run.write_cuts} cut, retried {dict(run.write_retries)}; "
        f"orders {dict(collections.Counter(o.outcome for o in run.orders.values()))}, {sum(o.attempts for o in run.orders.values())} calls, "
        f"{len(run.decided_at)} decided in the console, {len(undecided)} answered without a decision seen, "
        f"decision→answer ms {spread(waits)} (in the ledger, decided→completed {spread(gateway_waits)}); "
        f"console {dict(run.console)} (signed in: {VICTIM} after its restart {dict(run.console_victim_back)}), "
        f"sign-in on {dict(run.signins)}, unanswered {dict(run.console_errors)}; "
        f"notices {len(hooks.attempts)} attempts, {len(hooks.ordinal)} delivery ids; "
        f"clients rebuilt {dict(run.client_breaks)}; {'; '.join(run.events)}"
    )
    return line, failed


# ── The run ──────────────────────────────────────────────────────────────


def _terminated(signum, frame) -> None:
    """SIGTERM ends the run as Ctrl-C does: through main's `finally`."""
    raise KeyboardInterrupt


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-proxy":
        backends = []
        for spec in sys.argv[2:]:
            name, addr = spec.split("=", 1)
            host, port = addr.rsplit(":", 1)
            backends.append((name, host, int(port)))
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness ends it
        serve_proxy(backends)
        return 0

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="the toolgate binary")
    ap.add_argument("--short", action="store_true", help="CI's version: 20 s, 100 writes, 12 orders")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder and the schema")
    ap.add_argument("--postgres", default=os.environ.get("TOOLGATE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test"))
    args = ap.parse_args()
    binary = str(Path(args.bin).resolve())
    plan = Plan.of(args.short)
    signal.signal(signal.SIGTERM, _terminated)

    folder = Path(tempfile.mkdtemp(prefix="toolgate-replicas-"))
    schema = f"replicas_{os.getpid()}_{secrets.token_hex(4)}"
    children = Children()
    hooks: Hooks | None = None
    keep = args.keep
    schema_made = False
    try:
        psql(args.postgres, f"CREATE SCHEMA {schema}")
        schema_made = True
        ledger = ledger_url(args.postgres, schema)
        log(f"folder {folder}, ledger schema {schema}")

        support = start_atlas(children, binary, "support", folder / "support", folder / "support.log")
        parts = start_atlas(children, binary, "parts", folder / "parts", folder / "parts.log")
        hook_secret = secrets.token_hex(32)
        hooks = Hooks(hook_secret)

        tokens = {name: f"{name}-{secrets.token_hex(16)}" for name in CALLERS}
        env = dict(os.environ, **{env_var: tokens[name] for name, (_, env_var) in CALLERS.items()}, **{HOOK_SECRET_ENV: hook_secret})
        gateways = {}
        for name in REPLICAS:
            g = Gateway(name, folder / name, binary, env)
            g.folder.mkdir(mode=0o700)
            g.config.write_text(gateway_config(g.port, ledger, hooks.url, parts, support, plan))
            gateways[name] = g
        check_config(binary, gateways["a"].config, env)
        # a first: it makes the requestState key the others copy.
        gateways["a"].start(children)
        for name in REPLICAS[1:]:
            share_request_state_key(gateways["a"].folder, gateways[name].folder)
            gateways[name].start(children)
        log("replicas: " + ", ".join(f"{g.name} on :{g.port}" for g in gateways.values()))

        base = start_proxy(children, list(gateways.values()), folder / "proxy.log")
        run = Run(plan=plan, url=f"{base}/mcp", base=base, tokens=tokens, run_id=secrets.token_hex(4))

        async def everything():
            await load(run, gateways, children)
            log("notices: waiting for the webhook to have every approval")
            return await wait_for_notices(hooks, args.postgres, schema, 30)

        approvals = asyncio.run(everything())
        log(f"proxy: answers per replica {proxy_get(base, COUNTS_PATH)}")
        line, failed = verdict(run, hooks, approvals, folder, ledger_waits(args.postgres, schema))
        print(line, flush=True)
        for f in failed:
            log(f"FAILED: {f}")
        if failed:
            keep = True
        return 1 if failed else 0
    except Failed as e:
        log(f"FAILED: {e}")
        keep = True
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    except BaseException:
        keep = True
        raise
    finally:
        children.kill_all()
        if hooks is not None:
            hooks.close()
        if keep:
            log(f"kept {folder} and schema {schema} (drop it: psql '{args.postgres}' -c 'DROP SCHEMA {schema} CASCADE')")
        else:
            shutil.rmtree(folder, ignore_errors=True)
            if schema_made:
                try:
                    psql(args.postgres, f"DROP SCHEMA {schema} CASCADE")
                except Failed as e:
                    log(str(e))


if __name__ == "__main__":
    sys.exit(main())
