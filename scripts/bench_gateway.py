#!/usr/bin/env python3
"""The gateway's cost against the floor of any hop (issue "The lean hop").

Run by scripts/bench-gateway, which builds the parts and installs oha. Three
processes serve (the Atlas parts server, the bare relay in front of it,
toolgate in front of it; optionally a second toolgate build, "before"), and
one external load generator, oha, drives them from its own core. The legs
are alternated in short slices (direct, relay, toolgate[, before], repeat)
so the machine's noise falls on each alike:

  1. a fixed 1,000 calls/s, open loop (latency counted from when a call was
     due), long enough for the stall check (no call over 5 ms in 60 s);
  2. saturation at 16 and at 64 clients.

Three legs are toolgate in front of the same parts server reaching it as
each person (`[servers.parts.identity]`, issue 61): "assertion" (the
gateway's signed assertion, made per call), "exchange" (a token from an
RFC 8693 exchange at a token endpoint in this script, cached after the
first call) and "oauth" (the person's own grant at an authorization server
in this script: code flow, PKCE S256, a public client). For "oauth", the
script signs in to that toolgate's console as an admin who is the bench's
person, connects the gateway's own account (without it the server is down)
and the person's, as a browser would (the authorization server grants at
once, 302 back to the gateway's callback), and waits for the server's tools;
the calls then take the person's token from memory (read from the ledger at
most every 5 s). The Atlas parts server ignores every credential, so each
leg over "toolgate" is what its mode costs a call.

A leg "legacy" is toolgate in front of a second parts server that speaks
only the 2025-11-25 handshake (`atlas parts --legacy`): the legacy upstream
path, with its own upstream's CPU counted.

Two more legs are toolgate with the parts server as its stdio child
(`toolgate atlas parts --state DIR`, issue 59): "stdio", in its box (user and
network namespaces, Landlock, seccomp, limits; `[servers.parts.sandbox]
write = [DIR]`), and "stdio-off", the same with `sandbox = "off"`. Each
counts its own child's CPU as the upstream's. They are alternated with the
rest, so stdio/stdio-off is what the box costs a call. BENCH_STDIO_SETSID=1
adds "off-setsid": unboxed, but in a session of its own as the box's child
is (`setsid -w`), which the kernel's autogroups make a scheduling group of
its own; stdio/off-setsid is then the box's layers alone. Then the start: from
spawning `toolgate serve` with one server to its first tools/list through
the gateway that lists the server's tools (`serve` binds once its upstreams
are listed), for stdio, stdio-off and, as the reference without a child, an
HTTP upstream already running ("toolgate"); alternated, the median of
BENCH_STARTS each.

Per leg: throughput, p50, p99, max, the CPU each process spent per call,
context switches per call (each is a thread handing off or waiting), RSS.
Every answer is checked once to be the part list, every slice's status codes
must all be 200, and after the run toolgate's ledger must hold a receipt for
every call toolgate answered. The last line is the summary.

Knobs (environment): BENCH_SLICE_S (saturation slice, default 4),
BENCH_RATE_SLICE_S (fixed-rate slice, default 10), BENCH_ROUNDS (default 3
saturation rounds; the fixed rate runs 2x as many), BENCH_RATE (1000),
TOOLGATE_BENCH_BEFORE (a second toolgate binary, run as the leg "before"),
BENCH_STARTS (starts per kind, default 10), BENCH_ONLY=start (the starts alone),
BENCH_ONLY=hop (direct, relay, toolgate and before alone: a change that should cost nothing),
BENCH_STDIO_SETSID=1 (the leg "off-setsid"),
BENCH_VERBOSE=1 (one line per slice; scripts/bench_tail.py shows where a tail comes from), BENCH_KEEP=1
(keep the run's directory: the ledgers and each process's log).
"""

import base64
import hashlib
import html.parser
import http.cookiejar
import http.server
import json
import resource
import secrets
import socket
import shutil
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where `scripts/bench-gateway`'s cargo build put them.
RELEASE = os.path.join(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"), "release")
TOOLGATE = os.path.join(RELEASE, "toolgate")
RELAY = os.path.join(RELEASE, "examples/relay")
OHA = os.environ.get("OHA", "oha")
SLICE = float(os.environ.get("BENCH_SLICE_S", "4"))
RATE_SLICE = float(os.environ.get("BENCH_RATE_SLICE_S", "10"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
RATE = int(os.environ.get("BENCH_RATE", "1000"))
STARTS = int(os.environ.get("BENCH_STARTS", "10"))
SETSID = os.environ.get("BENCH_STDIO_SETSID") == "1"
ONLY = os.environ.get("BENCH_ONLY", "")
BEFORE = os.environ.get("TOOLGATE_BENCH_BEFORE")
CPUS = os.cpu_count() or 1
# oha on the last core; the servers on the others (all of them on one core).
LOAD_CPU = str(CPUS - 1)
SERVER_CPUS = ",".join(str(c) for c in range(max(CPUS - 1, 1)))
TICK = os.sysconf("SC_CLK_TCK")
ERA = "2026-07-28"
ARGUMENTS = {"model_variant": "AC-250-S", "category": "intake-filter"}


META = {"io.modelcontextprotocol/protocolVersion": ERA,
        "io.modelcontextprotocol/clientInfo": {"name": "bench-gateway", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}


def body(tool):
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": ARGUMENTS, "_meta": META}})


def headers(tool):
    return {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": ERA, "Mcp-Method": "tools/call", "Mcp-Name": tool}


class Proc:
    """A process by its pid: its CPU, context switches and RSS, from /proc."""

    def __init__(self, name, pid):
        self.name, self.pid = name, pid

    def cpu_ticks(self):
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    def switches(self):
        """Context switches of all the process's threads (voluntary + not)."""
        total = 0
        for task in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{task}/status") as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                            total += int(line.split()[1])
            except FileNotFoundError:
                pass
        return total

    def rss_mb(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def children(self):
        pids = []
        for task in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{task}/children") as f:
                    pids += [int(p) for p in f.read().split()]
            except FileNotFoundError:
                pass
        return pids


class Server(Proc):
    """One serving process, pinned to the servers' cores; its URL read off its output."""

    def __init__(self, name, argv, pattern, log_dir, env=None):
        self.name = name
        path = os.path.join(log_dir, f"{name}.log")
        self.log = open(path, "w+")
        # The process writes to a description of its own, appending: one
        # shared with self.log would write where its seek(0) below left the
        # offset, over the line read for (its second line over its first).
        with open(path, "a") as out:
            self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPUS, *argv], stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, "RUST_LOG": "warn", **(env or {})})
        # taskset execs the program: the same pid.
        self.pid = self.proc.pid
        deadline = time.time() + 30
        while time.time() < deadline:
            self.log.seek(0)
            m = re.search(pattern, self.log.read())
            if m:
                self.url = m.group(1)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        # Not in the caller's list of servers yet: stopped here.
        self.stop()
        self.log.seek(0)
        sys.exit(f"{name} did not start:\n{self.log.read()}")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def call_once(url, tool):
    req = urllib.request.Request(url, data=body(tool).encode(), headers=headers(tool), method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    if '"parts"' not in text or '"isError":true' in text:
        sys.exit(f"unexpected answer from {url}: {text[:400]}")
    return len(text)


def oha(url, tool, clients, seconds, rate=None):
    """One slice of load: every call's latency (s), its status codes, and the
    time from oha's start to the last answer (s)."""
    argv = [OHA, "--no-tui", "--output-format", "csv", "-z", f"{seconds}s", "-c", str(clients), "-m", "POST", "-d", body(tool)]
    for k, v in headers(tool).items():
        argv += ["-H", f"{k}: {v}"]
    if rate:
        # Open loop: a call's latency counts from when it was due.
        argv += ["-q", str(rate), "--latency-correction"]
    argv += ["--no-color", url]
    proc = subprocess.Popen(["taskset", "-c", LOAD_CPU, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"oha failed ({proc.returncode}): {err}")
    latencies, statuses, end = [], {}, 0.0
    # request-start,DNS,DNS+dialup,Response-delay,request-duration,bytes,status
    for line in out.splitlines()[1:]:
        cols = line.split(",")
        if len(cols) < 7:
            continue
        latencies.append(float(cols[4]))
        end = max(end, float(cols[0]) + float(cols[4]))
        statuses[cols[6]] = statuses.get(cols[6], 0) + 1
    return latencies, statuses, end


class Leg:
    def __init__(self, name, url, tool, hop=None, upstream=None):
        self.name, self.url, self.tool, self.hop = name, url, tool, hop
        # A leg with an upstream of its own (the legacy one) counts that one's CPU.
        self.upstream = upstream
        self.reset()

    def reset(self):
        self.latencies, self.elapsed, self.statuses = [], 0.0, {}
        self.cpu = {"upstream": 0, "hop": 0}
        self.ctx = {"upstream": 0, "hop": 0}
        self.rss_peak = 0.0
        self.cpu_load = 0.0


def percentile(sorted_values, q):
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def run_phase(legs, upstream, clients, seconds, rounds, rate=None):
    for leg in legs:
        leg.reset()
    for _ in range(rounds):
        for leg in legs:
            procs = {"upstream": leg.upstream or upstream, "hop": leg.hop}
            before = {k: (p.cpu_ticks(), p.switches()) for k, p in procs.items() if p}
            load = resource.getrusage(resource.RUSAGE_CHILDREN)
            latencies, statuses, elapsed = oha(leg.url, leg.tool, clients, seconds, rate)
            leg.elapsed += elapsed
            if os.environ.get("BENCH_VERBOSE"):
                lat = sorted(latencies)
                print(f"      slice {leg.name}: {len(lat)} calls, p50 {percentile(lat, 0.5) * 1e3:.3f} p99 {percentile(lat, 0.99) * 1e3:.3f} max {lat[-1] * 1e3:.2f} ms", flush=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            leg.cpu_load += (after.ru_utime + after.ru_stime) - (load.ru_utime + load.ru_stime)
            leg.latencies += latencies
            for k, v in statuses.items():
                leg.statuses[k] = leg.statuses.get(k, 0) + v
            for k, p in procs.items():
                if p:
                    ticks, ctx = p.cpu_ticks(), p.switches()
                    leg.cpu[k] += ticks - before[k][0]
                    leg.ctx[k] += ctx - before[k][1]
            if leg.hop:
                leg.rss_peak = max(leg.rss_peak, leg.hop.rss_mb())
    figures = {}
    for leg in legs:
        lat = sorted(leg.latencies)
        n = max(len(lat), 1)
        bad = {k: v for k, v in leg.statuses.items() if k != "200"}
        if bad:
            sys.exit(f"{leg.name}: answers other than 200: {bad}")
        figures[leg.name] = {
            "calls": len(lat),
            "throughput": len(lat) / leg.elapsed,
            "p50": percentile(lat, 0.5) * 1e3, "p99": percentile(lat, 0.99) * 1e3, "max": (lat[-1] if lat else 0) * 1e3,
            "over5": sum(1 for x in lat if x > 0.005),
            "cpu_upstream": leg.cpu["upstream"] / TICK / n * 1e6, "cpu_hop": leg.cpu["hop"] / TICK / n * 1e6,
            "cpu_load": leg.cpu_load / n * 1e6,
            "ctx_upstream": leg.ctx["upstream"] / n, "ctx_hop": leg.ctx["hop"] / n,
            "rss_peak": leg.rss_peak,
        }
    return figures


def show(title, figures):
    print(f"\n{title}")
    print(f"   {'leg':<9} {'calls/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'>5ms':>5}  {'CPU µs/call: hop + upstream (oha)':>33}  {'switches/call: hop + upstream':>29}")
    for name, f in figures.items():
        print(f"   {name:<9} {f['throughput']:>9.0f} {f['p50']:>8.3f} {f['p99']:>8.3f} {f['max']:>8.2f} {f['over5']:>5}  "
              f"{f['cpu_hop']:>13.0f} + {f['cpu_upstream']:>8.0f} ({f['cpu_load']:>5.0f})  {f['ctx_hop']:>15.2f} + {f['ctx_upstream']:>11.2f}")


def http_server(upstream):
    """The `[servers.parts]` table of an HTTP upstream."""
    return f'''[servers.parts]
url = "{upstream}"
'''


def identity_server(upstream, mode, token_endpoint=None, issuer=None):
    """The `[servers.parts]` table of the HTTP upstream, reached as each
    person (`[servers.parts.identity]`): by the gateway's assertion, by a
    token from an exchange at `token_endpoint` (kept, so each call after the
    first takes the cached token), or by the person's own OAuth grant at the
    authorization server `issuer` (a public client: PKCE, no secret)."""
    table = http_server(upstream) + f'\n[servers.parts.identity]\nmode = "{mode}"\n'
    if mode == "exchange":
        table += f'token_endpoint = "{token_endpoint}"\nclient_id = "bench"\n'
    if mode == "oauth":
        # The parts server publishes no metadata of its own (RFC 9728).
        table += f'authorization_server = "{issuer}"\nclient_id = "bench"\n'
    return table


def token_endpoint():
    """An RFC 8693 token endpoint for the exchange leg: every exchange gets
    one access token good for an hour. The leg measures the call's path with
    the token cached (the exchange itself runs once), so what answers it
    only has to answer."""
    import http.server
    import threading

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            body = json.dumps({"access_token": "bench-exchanged-token-0123456789", "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                               "token_type": "Bearer", "expires_in": 3600}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/token"


def authorization_server():
    """An OAuth 2.1 authorization server for the oauth leg, its issuer URL:
    RFC 8414 metadata, the code flow with PKCE S256 for a public client, and
    refresh. It grants every authorization at once (no login page: a 302
    straight back to the redirect_uri with the code and the state); a code
    is redeemed once, with the verifier of its challenge and its
    redirect_uri. Each access token lasts an hour, and the leg measures the
    call with the person's token cached, so what answers only has to answer."""
    lock = threading.Lock()
    codes, refresh_tokens = {}, set()

    class Answer(http.server.BaseHTTPRequestHandler):
        def answer(self, status, document=None, location=None):
            body = json.dumps(document).encode() if document is not None else b""
            self.send_response(status)
            if location:
                self.send_header("location", location)
            self.send_header("content-type", "application/json")
            self.send_header("cache-control", "no-store")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/.well-known/oauth-authorization-server":
                return self.answer(200, {
                    "issuer": issuer, "authorization_endpoint": f"{issuer}/authorize", "token_endpoint": f"{issuer}/token",
                    "code_challenge_methods_supported": ["S256"], "token_endpoint_auth_methods_supported": ["none"],
                    "response_types_supported": ["code"], "grant_types_supported": ["authorization_code", "refresh_token"]})
            if url.path != "/authorize":
                return self.answer(404, {"error": "not_found"})
            q = dict(urllib.parse.parse_qsl(url.query))
            if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256" or not q.get("code_challenge") \
                    or not q.get("redirect_uri") or not q.get("state") or q.get("client_id") != "bench":
                return self.answer(400, {"error": "invalid_request"})
            code = secrets.token_urlsafe(24)
            with lock:
                codes[code] = (q["code_challenge"], q["redirect_uri"])
            back = urllib.parse.urlencode({"code": code, "state": q["state"]})
            self.answer(302, location=q["redirect_uri"] + ("&" if "?" in q["redirect_uri"] else "?") + back)

        def do_POST(self):
            form = dict(urllib.parse.parse_qsl(self.rfile.read(int(self.headers.get("content-length", 0))).decode()))
            if urllib.parse.urlsplit(self.path).path != "/token":
                return self.answer(404, {"error": "not_found"})
            if form.get("client_id") != "bench":
                return self.answer(401, {"error": "invalid_client"})
            with lock:
                if form.get("grant_type") == "authorization_code":
                    issued = codes.pop(form.get("code"), None)
                    challenge = base64.urlsafe_b64encode(hashlib.sha256(form.get("code_verifier", "").encode()).digest()).rstrip(b"=").decode()
                    granted = issued == (challenge, form.get("redirect_uri"))
                elif form.get("grant_type") == "refresh_token":
                    granted = form.get("refresh_token") in refresh_tokens
                    refresh_tokens.discard(form.get("refresh_token"))
                else:
                    return self.answer(400, {"error": "unsupported_grant_type"})
                if not granted:
                    return self.answer(400, {"error": "invalid_grant"})
                refresh = secrets.token_urlsafe(32)
                refresh_tokens.add(refresh)
            self.answer(200, {"access_token": secrets.token_urlsafe(32), "token_type": "Bearer", "expires_in": 3600, "refresh_token": refresh})

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    issuer = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return issuer


def stdio_server(state, boxed):
    """The `[servers.parts]` table of the parts server as toolgate's stdio
    child, writing its sandbox files in `state`: in its box (granted that
    folder), or unboxed (`sandbox = "off"`)."""
    os.makedirs(state, exist_ok=True)
    table = f'''[servers.parts]
command = {json.dumps(TOOLGATE)}
args = ["atlas", "parts", "--state", {json.dumps(state)}]
'''
    if boxed:
        return table + f"\n[servers.parts.sandbox]\nwrite = [{json.dumps(state)}]\n"
    return table + 'sandbox = "off"\n'


def setsid_server(state):
    """The unboxed parts server in a session of its own, as the box's child
    is (`setsid -w`: the child toolgate spawns leads its process group, so
    setsid forks, and waits), for BENCH_STDIO_SETSID."""
    os.makedirs(state, exist_ok=True)
    return f'''[servers.parts]
command = "setsid"
args = ["-w", {json.dumps(TOOLGATE)}, "atlas", "parts", "--state", {json.dumps(state)}]
sandbox = "off"
'''


def toolgate_config(server, listen="127.0.0.1:0", extra=""):
    return f"""[gateway]
listen = "{listen}"
state_dir = "state"

{server}
[registry."parts__find_part"]
class = "automatic"
read_only = true

[callers.bench]
tenant = "bench"
anonymous = true
{extra}"""


def receipts_in(state_dir):
    """The receipts in a toolgate's ledger, and the bytes its pages take per
    receipt (the WAL's latest pages included, free pages not). A read's
    receipts wait in the ledger's sequence file until the gateway's next
    transaction integrates them (within 100 ms of the last call): this reads
    the table once that file is empty."""
    sequence = os.path.join(state_dir, "ledger.sqlite3.sequence")
    deadline = time.time() + 5
    while os.path.exists(sequence) and os.path.getsize(sequence) > 0 and time.time() < deadline:
        time.sleep(0.05)
    db = sqlite3.connect(f"file:{os.path.join(state_dir, 'ledger.sqlite3')}?mode=ro", uri=True)
    try:
        n = db.execute("SELECT COUNT(*) FROM receipts").fetchone()[0]
        pragma = lambda name: db.execute(f"PRAGMA {name}").fetchone()[0]
        used = (pragma("page_count") - pragma("freelist_count")) * pragma("page_size")
        return n, used / max(n, 1)
    finally:
        db.close()


def write_config(home, server, **more):
    os.makedirs(home)
    config = os.path.join(home, "toolgate.toml")
    with open(config, "w") as f:
        f.write(toolgate_config(server, **more))
    return config


def start_toolgate(name, binary, upstream, work, logs, server=None, env=None, **more):
    """A toolgate in front of the HTTP `upstream`, or of `server` (a
    `[servers.parts]` table) when given; `more`: its `listen` and `extra`
    config (see `toolgate_config`)."""
    home = os.path.join(work, name)
    config = write_config(home, server or http_server(upstream), **more)
    gateway = Server(name, [binary, "serve", "--config", config], r"serving MCP on (\S+)", logs, env)
    gateway.state = os.path.join(home, "state")
    return gateway


# The oauth leg's console: on (the default, said: the consent pages and the
# OAuth callback are there), and a caller who signs in to it: an admin (who
# connects the gateway's own account) who is the bench's person (tenant and
# subject "bench", as the anonymous caller the load calls as), so the
# connection it makes for itself is the one every call of the load uses.
CONSOLE_TOKEN_ENV = "TOOLGATE_BENCH_CONSOLE_TOKEN"
OAUTH_EXTRA = f"""
[callers.console]
token_env = "{CONSOLE_TOKEN_ENV}"
subject = "bench"
tenant = "bench"
roles = ["admin"]

[console]
enabled = true
"""


def free_port():
    """A loopback port nobody listens on now: the oauth leg's toolgate is
    started on it, its public URL (the OAuth callback's) named before it starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page(html.parser.HTMLParser):
    """A console page as a browser reads it: its final URL, text, links
    (`a` by id: href, unescaped) and input values (by name)."""

    def __init__(self, url, text):
        super().__init__()
        self.url, self.text, self.links, self.inputs = url, text, {}, {}
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("id") and a.get("href"):
            self.links[a["id"]] = a["href"]
        if tag == "input" and a.get("name"):
            self.inputs[a["name"]] = a.get("value") or ""


def connect(base, token, server="parts"):
    """Signs in to the console at `base` with `token` and connects, as a
    browser would, the gateway's own account at `server` (the caller is an
    admin), then the caller's own: each from its link on the Connections
    page, to the consent page (whose cookie binds the authorization to this
    browser), to the authorization server, whose 302 lands on the gateway's
    callback. A cookie jar follows every redirect."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(url, form=None):
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        try:
            with opener.open(urllib.request.Request(url, data=data), timeout=30) as r:
                return Page(r.geturl(), r.read().decode())
        except urllib.error.HTTPError as e:
            sys.exit(f"oauth: {e.code} from {e.geturl()} (connecting in the console): {e.read().decode(errors='replace')[:600]}")

    signin = get(f"{base}/console/signin")
    connections = get(f"{base}/console/signin", {"form": signin.inputs.get("form", ""), "token": token, "next": "/console/connections"})
    for link in (f"connect-gateway-{server}", f"connect-{server}"):
        if link not in connections.links:
            sys.exit(f"oauth: no a#{link} on {connections.url}: {connections.text[:1000]}")
        consent = get(urllib.parse.urljoin(base, connections.links[link]))
        if "connect" not in consent.links:
            sys.exit(f"oauth: no a#connect on {consent.url}: {consent.text[:1000]}")
        done = get(consent.links["connect"])
        if 'id="connected"' not in done.text:
            sys.exit(f"oauth: {link} did not connect (at {done.url}): {done.text[:1000]}")
        connections = get(f"{base}/console/connections")


def start_oauth(upstream, work, logs, servers):
    """The oauth leg's toolgate (added to `servers`), in front of the HTTP
    `upstream`, each person reaching it with their own grant at an
    authorization server of this script's. It reads the server's tools with
    its own account, so the server is down until that is connected:
    connected (and the bench's person), then waited for until a tools/list
    through it lists the server."""
    token = secrets.token_urlsafe(32)
    hop = start_toolgate("oauth", TOOLGATE, upstream, work, logs, identity_server(upstream, "oauth", issuer=authorization_server()),
                         env={CONSOLE_TOKEN_ENV: token}, listen=f"127.0.0.1:{free_port()}", extra=OAUTH_EXTRA)
    servers.append(hop)
    parts = urllib.parse.urlsplit(hop.url)
    connect(f"{parts.scheme}://{parts.netloc}", token)
    # The callback nudged the server's supervisor; it lists the server now.
    deadline = time.time() + 30
    while "parts__find_part" not in (list_tools(hop.url) or ""):
        if time.time() > deadline:
            sys.exit(f"oauth: parts__find_part not listed 30 s after the gateway's account was connected; see {logs}/oauth.log")
        time.sleep(0.1)
    return hop


def stdio_child(gateway):
    """The parts server a toolgate started as its stdio child, or below a
    wrapper such as `setsid -w` (it is listed before `serve` binds, so it is
    running by now)."""
    below = gateway.children()
    while below:
        pid = below.pop(0)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except FileNotFoundError:
            continue
        if argv[1:3] == [b"atlas", b"parts"]:
            return Proc(f"{gateway.name}-child", pid)
        below += Proc("", pid).children()
    sys.exit(f"{gateway.name}: no stdio child found")


def box_of(proc):
    """What /proc says of a process's box: its seccomp mode, no_new_privs,
    and whether its user and network namespaces are its own."""
    status = {}
    with open(f"/proc/{proc.pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            status[k] = v.strip()
    own = [ns for ns in ("user", "net") if os.readlink(f"/proc/{proc.pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")]
    seccomp = {"0": "no seccomp", "1": "seccomp strict", "2": "seccomp filter"}.get(status.get("Seccomp"), "seccomp ?")
    parts = [seccomp, f"no_new_privs {status.get('NoNewPrivs', '?')}", "own " + "+".join(own) + " namespaces" if own else "the host's namespaces"]
    return ", ".join(parts), seccomp == "seccomp filter" and own == ["user", "net"]


def autogroup(proc):
    """The scheduler's autogroup of a process (one per session, when
    kernel.sched_autogroup_enabled is 1), or "autogroups off"."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            if f.read().strip() != "1":
                return "autogroups off"
        with open(f"/proc/{proc.pid}/autogroup") as f:
            return f.read().split()[0].lstrip("/")
    except OSError:
        return "autogroups off"


def list_tools(url):
    """One tools/list through a gateway: its text, or None if it did not answer 200."""
    data = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}).encode()
    hdrs = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": ERA, "Mcp-Method": "tools/list"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=hdrs, method="POST"), timeout=10) as r:
            return r.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None


def one_start(config, log_path):
    """Spawns `toolgate serve` on `config` and times it: to its "serving"
    line (it binds once its upstream is listed), and to the first tools/list
    through it that lists parts__find_part. Stops it. Seconds."""
    with open(log_path, "a") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(["taskset", "-c", SERVER_CPUS, TOOLGATE, "serve", "--config", config], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn"})
        try:
            url = None
            for raw in proc.stdout:
                line = raw.decode(errors="replace")
                log.write(line)
                m = re.search(r"serving MCP on (\S+)", line)
                if m:
                    url, t_bound = m.group(1), time.perf_counter()
                    break
            if url is None:
                sys.exit(f"toolgate did not start on {config}; see {log_path}")
            # Its later output, if any, goes to the log.
            drain = threading.Thread(target=lambda: [log.write(r.decode(errors="replace")) for r in proc.stdout], daemon=True)
            drain.start()
            deadline = time.time() + 30
            while True:
                text = list_tools(url)
                if text and "parts__find_part" in text:
                    t_listed = time.perf_counter()
                    break
                if time.time() > deadline:
                    sys.exit(f"toolgate on {config} never listed parts__find_part: {(text or '')[:400]}")
                time.sleep(0.001)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        drain.join(timeout=5)
    return t_bound - t0, t_listed - t0


def start_costs(upstream, work, logs):
    """The start of a toolgate with one server: stdio in its box, stdio
    unboxed, and an HTTP upstream already running (the gateway's own start,
    no child). Each kind's state is made by a first, untimed start; then
    BENCH_STARTS starts of each, alternated (the order turned each round).
    Per kind: the times to the first tools/list, and to "serving", in the
    order of the rounds (a round's starts are close in time: their
    differences are the fairest comparison on a busy machine)."""
    kinds = {"stdio": stdio_server(os.path.join(work, "start-atlas-stdio"), True),
             "stdio-off": stdio_server(os.path.join(work, "start-atlas-stdio-off"), False),
             "toolgate": http_server(upstream.url)}
    configs = {k: write_config(os.path.join(work, f"start-{k}"), server) for k, server in kinds.items()}
    log = lambda k: os.path.join(logs, f"start-{k}.log")
    for k, config in configs.items():
        one_start(config, log(k))
    listed = {k: [] for k in kinds}
    bound = {k: [] for k in kinds}
    names = list(kinds)
    for i in range(STARTS):
        for k in names[i % len(names):] + names[:i % len(names)]:
            b, l = one_start(configs[k], log(k))
            bound[k].append(b * 1e3)
            listed[k].append(l * 1e3)
            if os.environ.get("BENCH_VERBOSE"):
                print(f"      start {k}: serving at {b * 1e3:.1f} ms, listed at {l * 1e3:.1f} ms", flush=True)
    return listed, bound


def median(values):
    return percentile(values, 0.5) if len(values) % 2 else (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2


def paired(listed, a, b):
    """The median of a's start minus b's, round by round (ms)."""
    return median(sorted(x - y for x, y in zip(listed[a], listed[b])))


def show_starts(listed, bound):
    print(f"\nstart: `toolgate serve` spawned to its first tools/list listing the server's tools, {STARTS} starts per kind, alternated")
    print(f"   {'kind':<9} {'median ms':>10} {'min':>8} {'max':>8}   {'to serving, median':>18}")
    for k in listed:
        v = sorted(listed[k])
        print(f"   {k:<9} {median(v):>10.1f} {v[0]:>8.1f} {v[-1]:>8.1f}   {median(sorted(bound[k])):>18.1f}")
    print(f"   round by round, median: stdio - stdio-off {paired(listed, 'stdio', 'stdio-off'):+.1f} ms, stdio-off - toolgate {paired(listed, 'stdio-off', 'toolgate'):+.1f} ms")


def start_figures(listed):
    """The start line's figures: medians of stdio, stdio-off and the HTTP
    upstream, the paired box difference, and the minima's difference."""
    m = {k: median(sorted(v)) for k, v in listed.items()}
    return m["stdio"], m["stdio-off"], m["toolgate"], paired(listed, "stdio", "stdio-off"), min(listed["stdio"]) - min(listed["stdio-off"])


def start_parts(work, logs, servers):
    """The Atlas parts server and the bare relay in front of it, added to `servers`."""
    upstream = Server("upstream", [TOOLGATE, "atlas", "parts", "--http", "127.0.0.1:0", "--state", os.path.join(work, "atlas")],
                      r"serving parts on (\S+)", logs)
    servers.append(upstream)
    relay = Server("relay", [RELAY, "127.0.0.1:0", upstream.url], r"serving on (\S+)", logs)
    servers.append(relay)
    return upstream, relay


def workdir(prefix):
    """A fresh directory for one run's state, and its `logs` folder."""
    work = tempfile.mkdtemp(prefix=prefix)
    logs = os.path.join(work, "logs")
    os.makedirs(logs)
    return work, logs


def measure(legs, upstream):
    """The load phases every run has, the legs alternated: a warm-up, the
    fixed rate, then saturation at 16 and 64 clients. Returns the fixed
    rate's figures, saturation's by clients, and the calls each leg timed."""
    run_phase(legs, upstream, 16, 1, 1)  # warm every path
    # The fixed rate first, on a young ledger: after saturation the
    # gateway's disk is still writing back hundreds of MB, and that
    # writeback, not the gateway, would set every leg's tail.
    fixed = run_phase(legs, upstream, 32, RATE_SLICE, 2 * ROUNDS, RATE)
    show(f"fixed rate {RATE} calls/s (open loop), {2 * ROUNDS} slices of {RATE_SLICE:g} s per leg", fixed)
    counted = {name: f["calls"] for name, f in fixed.items()}
    sat = {}
    for clients in (16, 64):
        sat[clients] = run_phase(legs, upstream, clients, SLICE, ROUNDS)
        show(f"saturation, {clients} clients, {ROUNDS} slices of {SLICE:g} s per leg", sat[clients])
        for name, f in sat[clients].items():
            counted[name] += f["calls"]
    return fixed, sat, counted


def receipts(legs, names, counted):
    """Every call the legs `names` answered has its receipt in the ledger
    (exit 1 if not); returns the bytes stored per receipt, by leg."""
    per_receipt = {}
    for leg in legs:
        if leg.name in names:
            n, per_receipt[leg.name] = receipts_in(leg.hop.state)
            answered = counted[leg.name]
            verdict = "every call has its receipt" if n >= answered else "RECEIPTS MISSING"
            print(f"   {leg.name}: {n} receipts in the ledger for {answered} calls timed (+ warm-up): {verdict}; {per_receipt[leg.name]:.0f} B/receipt stored")
            if n < answered:
                sys.exit(1)
    return per_receipt


def hop_only(legs, upstream):
    """BENCH_ONLY=hop: direct, relay, toolgate (and before) alone, for a
    change that should cost nothing: the same phases, a shorter run."""
    print(f"toolgate bench-gateway, BENCH_ONLY=hop — {CPUS} cores: oha on cpu {LOAD_CPU}, servers on cpu {SERVER_CPUS}")
    fixed, sat, counted = measure(legs, upstream)
    receipts(legs, ("toolgate", "before"), counted)
    g, r = fixed["toolgate"], fixed["relay"]
    line = "toolgate/relay at saturation: " + ", ".join(f"{sat[c]['toolgate']['throughput'] / sat[c]['relay']['throughput']:.2f}x at {c}" for c in sat)
    line += f"; at {RATE}/s {g['cpu_hop'] - r['cpu_hop']:.0f} us CPU/call over relay, p50 {g['p50']:.3f} ms, p99 {g['p99']:.3f} ms"
    if "before" in fixed:
        b = fixed["before"]
        line += ("; toolgate/before at saturation: " + ", ".join(f"{sat[c]['toolgate']['throughput'] / sat[c]['before']['throughput']:.2f}x at {c}" for c in sat)
                 + f"; at {RATE}/s CPU/call {g['cpu_hop']:.0f} / {b['cpu_hop']:.0f} us ({g['cpu_hop'] - b['cpu_hop']:+.1f}), p50 {g['p50']:.3f} / {b['p50']:.3f} ms, p99 {g['p99']:.3f} / {b['p99']:.3f} ms")
    print("\n   " + line)


def main():
    work, logs = workdir("bench-gateway-")
    servers = []
    try:
        upstream, relay = start_parts(work, logs, servers)
        if ONLY == "start":
            print(f"toolgate bench-gateway, BENCH_ONLY=start — {CPUS} cores: toolgate on cpu {SERVER_CPUS}")
            listed, bound = start_costs(upstream, work, logs)
            show_starts(listed, bound)
            s, o, h, d, dmin = start_figures(listed)
            print(f"start to the first tools/list: stdio {s:.1f} ms boxed, {o:.1f} ms off; the box {d:+.1f} ms round by round ({dmin:+.1f} ms between the minima); HTTP upstream {h:.1f} ms")
            return
        gateway = start_toolgate("toolgate", TOOLGATE, upstream.url, work, logs)
        servers.append(gateway)
        legs = [Leg("direct", upstream.url, "find_part"), Leg("relay", relay.url, "find_part", relay),
                Leg("toolgate", gateway.url, "parts__find_part", gateway)]
        if BEFORE:
            before = start_toolgate("before", BEFORE, upstream.url, work, logs)
            servers.append(before)
            legs.append(Leg("before", before.url, "parts__find_part", before))
        if ONLY == "hop":
            return hop_only(legs, upstream)
        # toolgate reaching the same server as each person (issue 61): by
        # an assertion, by an exchanged token, cached after the first call,
        # and by the person's own OAuth grant, connected in the console
        # first, its token cached.
        exchange_at = token_endpoint()
        for mode in ("assertion", "exchange"):
            hop = start_toolgate(mode, TOOLGATE, upstream.url, work, logs, identity_server(upstream.url, mode, exchange_at))
            servers.append(hop)
            legs.append(Leg(mode, hop.url, "parts__find_part", hop))
        hop = start_oauth(upstream.url, work, logs, servers)
        legs.append(Leg("oauth", hop.url, "parts__find_part", hop))
        # toolgate in front of the same server speaking 2025-11-25 only: one
        # legacy session, each answer an SSE stream (where a missing
        # TCP_NODELAY once cost 40 ms a call).
        legacy_upstream = Server("legacy-upstream", [TOOLGATE, "atlas", "parts", "--legacy", "--http", "127.0.0.1:0", "--state", os.path.join(work, "atlas-legacy")],
                                 r"serving parts on (\S+)", logs)
        servers.append(legacy_upstream)
        legacy = start_toolgate("legacy", TOOLGATE, legacy_upstream.url, work, logs)
        servers.append(legacy)
        legs.append(Leg("legacy", legacy.url, "parts__find_part", legacy, legacy_upstream))
        # toolgate with the parts server as its stdio child, in its box and
        # not; each leg counts its own child as its upstream.
        boxes = {}
        for name, boxed in (("stdio", True), ("stdio-off", False)):
            hop = start_toolgate(name, TOOLGATE, None, work, logs, stdio_server(os.path.join(work, f"atlas-{name}"), boxed))
            servers.append(hop)
            child = stdio_child(hop)
            legs.append(Leg(name, hop.url, "parts__find_part", hop, child))
            boxes[name], in_box = box_of(child)
            if in_box != boxed:
                sys.exit(f"{name}: its child is {'not ' if boxed else ''}in a box: {boxes[name]}")
        if SETSID:
            # Unboxed, but in a session of its own like the box's child:
            # with the kernel's autogroups on, a session is a scheduling
            # group of its own (docs/BENCHMARKS.md, "The box").
            hop = start_toolgate("off-setsid", TOOLGATE, None, work, logs, setsid_server(os.path.join(work, "atlas-off-setsid")))
            servers.append(hop)
            legs.append(Leg("off-setsid", hop.url, "parts__find_part", hop, stdio_child(hop)))
        for leg in legs:
            if leg.name.startswith(("stdio", "off-")):
                boxes.setdefault(leg.name, box_of(leg.upstream)[0])
                session = "its own session" if os.getsid(leg.upstream.pid) == leg.upstream.pid else "the gateway's session"
                boxes[leg.name] += f", {session}, {autogroup(leg.upstream)}"
        # Idle: started, its upstream listed, nothing called yet.
        time.sleep(3)
        idle = {leg.name: leg.hop.rss_mb() for leg in legs if leg.hop}
        sizes = {leg.name: call_once(leg.url, leg.tool) for leg in legs}
        print(f"toolgate bench-gateway — find_part on the Atlas parts server; {CPUS} cores: oha on cpu {LOAD_CPU}, servers on cpu {SERVER_CPUS}")
        print("   answer bytes: " + ", ".join(f"{k} {v}" for k, v in sizes.items()))
        print("   idle RSS: " + ", ".join(f"{k} {v:.1f} MB" for k, v in idle.items()) + f"; upstream {upstream.rss_mb():.1f} MB"
              + "".join(f"; {leg.name}'s child {leg.upstream.rss_mb():.1f} MB" for leg in legs if leg.name.startswith(("stdio", "off-"))))
        print("   stdio children: " + "; ".join(f"{k}: {v}" for k, v in boxes.items()))
        # The starts before any load: the saturation's writeback would land in them.
        listed, bound = start_costs(upstream, work, logs)
        show_starts(listed, bound)
        fixed, sat, counted = measure(legs, upstream)
        print("   RSS under load (peak): " + ", ".join(f"{leg.name} {leg.rss_peak:.1f} MB" for leg in legs if leg.hop))
        per_receipt = receipts(legs, ("toolgate", "before", "legacy", "stdio", "stdio-off", "off-setsid", "assertion", "exchange", "oauth"), counted)
        g, r = fixed["toolgate"], fixed["relay"]
        best = max((sat[c]["toolgate"]["throughput"] / sat[c]["relay"]["throughput"], c) for c in sat)
        ratios = ", ".join(f"{sat[c]['toolgate']['throughput'] / sat[c]['relay']['throughput']:.2f}x at {c}" for c in sat)
        if BEFORE:
            b = fixed["before"]
            before_ratios = ", ".join(f"{sat[c]['before']['throughput'] / sat[c]['relay']['throughput']:.2f}x at {c}" for c in sat)
            print(f"\n   before/relay at saturation: {before_ratios}; at {RATE}/s {b['p50'] - r['p50']:+.2f} ms p50, {b['cpu_hop'] - r['cpu_hop']:.0f} us CPU/call over relay, "
                  f"{b['ctx_hop']:.2f} switches/call, {b['over5']} calls over 5 ms, max {b['max']:.1f} ms; {per_receipt['before']:.0f} B/receipt")
        print(f"\n   toolgate/relay at saturation: {ratios}; toolgate max at {RATE}/s {g['max']:.2f} ms ({g['over5']} calls over 5 ms)")
        # Upstream identity: each mode's CPU per call over the shared credential's.
        ident = {m: fixed[m]["cpu_hop"] - g["cpu_hop"] for m in ("assertion", "exchange", "oauth")}
        print("   identity over shared, CPU/call at " + f"{RATE}/s: " + ", ".join(f"{m} {d:+.1f} us" for m, d in ident.items())
              + "; at saturation: " + ", ".join(f"{m} " + "/".join(f"{sat[c][m]['throughput'] / sat[c]['toolgate']['throughput']:.2f}" for c in sat) + "x" for m in ident)
              + f" at {'/'.join(str(c) for c in sat)} clients")
        l = fixed["legacy"]
        stall = "no stall" if l["p50"] < 5 else "STALLED"
        print(f"   through a legacy upstream (2025-11-25 session, SSE answers): {stall}; at {RATE}/s {l['p50'] - g['p50']:+.2f} ms p50 and "
              f"{l['p99'] - g['p99']:+.2f} ms p99 against the 2026-07-28 upstream, max {l['max']:.1f} ms, {l['over5']} calls over 5 ms")
        # The box: stdio against stdio-off, and both against the HTTP upstream.
        sb, so = fixed["stdio"], fixed["stdio-off"]
        box_sat = {c: sat[c]["stdio"]["throughput"] / sat[c]["stdio-off"]["throughput"] for c in sat}
        start_box, start_off, start_http, start_delta, start_dmin = start_figures(listed)
        print("   stdio boxed/off at saturation: " + ", ".join(f"{box_sat[c]:.2f}x at {c} ({sat[c]['stdio']['throughput']:.0f} / {sat[c]['stdio-off']['throughput']:.0f} calls/s)" for c in sat)
              + "; stdio-off/toolgate (HTTP upstream): " + ", ".join(f"{sat[c]['stdio-off']['throughput'] / sat[c]['toolgate']['throughput']:.2f}x at {c}" for c in sat))
        print(f"   stdio at {RATE}/s: p50 {sb['p50']:.3f} / {so['p50']:.3f} ms, p99 {sb['p99']:.3f} / {so['p99']:.3f} ms (boxed / off; HTTP upstream {g['p50']:.3f} / {g['p99']:.3f}); "
              f"child's CPU/call {sb['cpu_upstream']:.0f} / {so['cpu_upstream']:.0f} us, hop's {sb['cpu_hop']:.0f} / {so['cpu_hop']:.0f} us; "
              f"max {sb['max']:.1f} / {so['max']:.1f} ms, {sb['over5']} / {so['over5']} calls over 5 ms")
        if SETSID:
            ss = fixed["off-setsid"]
            print("   stdio boxed/off-setsid (sessions alike) at saturation: " + ", ".join(f"{sat[c]['stdio']['throughput'] / sat[c]['off-setsid']['throughput']:.2f}x at {c}" for c in sat)
                  + f"; at {RATE}/s p50 {sb['p50'] / ss['p50']:.2f}x, p99 {sb['p99'] / ss['p99']:.2f}x; off-setsid/stdio-off " + ", ".join(f"{sat[c]['off-setsid']['throughput'] / sat[c]['stdio-off']['throughput']:.2f}x at {c}" for c in sat))
        print(f"   start to the first tools/list: stdio {start_box:.1f} ms boxed, {start_off:.1f} ms off; the box {start_delta:+.1f} ms round by round "
              f"({start_dmin:+.1f} ms between the minima); HTTP upstream {start_http:.1f} ms")
        # The issue's form: figures at the fixed rate unless said otherwise.
        print(f"toolgate/relay {best[0]:.2f}x at saturation; {g['p50'] - r['p50']:+.2f} ms p50, {g['p99'] - r['p99']:+.2f} ms p99 at {RATE}/s; "
              f"idle RSS {idle['toolgate']:.1f} MB; {g['cpu_hop'] - r['cpu_hop']:.0f} us CPU/call over relay; {g['ctx_hop']:.2f} switches/call; "
              f"{per_receipt['toolgate']:.0f} B/receipt; {g['over5']} calls over 5 ms (relay {r['over5']}), max {g['max']:.1f} ms; "
              f"stdio boxed/off {'/'.join(f'{box_sat[c]:.2f}' for c in sat)}x at {'/'.join(str(c) for c in sat)} clients, "
              f"p50 {sb['p50'] / so['p50']:.2f}x, p99 {sb['p99'] / so['p99']:.2f}x at {RATE}/s, start {start_box:.0f} / {start_off:.0f} ms ({start_delta:+.1f} ms)")
    finally:
        for s in servers:
            s.stop()
        # The ledgers hold hundreds of MB after a run; BENCH_KEEP=1 keeps them (and the logs).
        if os.environ.get("BENCH_KEEP"):
            print(f"   kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
