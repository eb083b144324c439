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

A last leg, "legacy", is toolgate in front of a second parts server that
speaks only the 2025-11-25 handshake (`atlas parts --legacy`): the legacy
upstream path, with its own upstream's CPU counted.

Per leg: throughput, p50, p99, max, the CPU each process spent per call,
context switches per call (each is a thread handing off or waiting), RSS.
Every answer is checked once to be the part list, every slice's status codes
must all be 200, and after the run toolgate's ledger must hold a receipt for
every call toolgate answered. The last line is the summary.

Knobs (environment): BENCH_SLICE_S (saturation slice, default 4),
BENCH_RATE_SLICE_S (fixed-rate slice, default 10), BENCH_ROUNDS (default 3
saturation rounds; the fixed rate runs 2x as many), BENCH_RATE (1000),
TOOLGATE_BENCH_BEFORE (a second toolgate binary, run as the leg "before"),
BENCH_VERBOSE=1 (one line per slice; scripts/bench_tail.py shows where a tail comes from), BENCH_KEEP=1
(keep the run's directory: the ledgers and each process's log).
"""

import json
import resource
import shutil
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
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
BEFORE = os.environ.get("TOOLGATE_BENCH_BEFORE")
CPUS = os.cpu_count() or 1
# oha on the last core; the servers on the others (all of them on one core).
LOAD_CPU = str(CPUS - 1)
SERVER_CPUS = ",".join(str(c) for c in range(max(CPUS - 1, 1)))
TICK = os.sysconf("SC_CLK_TCK")
ERA = "2026-07-28"
ARGUMENTS = {"model_variant": "AC-250-S", "category": "intake-filter"}


def body(tool):
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": ARGUMENTS, "_meta": {
            "io.modelcontextprotocol/protocolVersion": ERA,
            "io.modelcontextprotocol/clientInfo": {"name": "bench-gateway", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}}})


def headers(tool):
    return {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": ERA, "Mcp-Method": "tools/call", "Mcp-Name": tool}


class Server:
    """One serving process, pinned to the servers' cores; its URL read off its output."""

    def __init__(self, name, argv, pattern, log_dir, env=None):
        self.name = name
        self.log = open(os.path.join(log_dir, f"{name}.log"), "w+")
        self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPUS, *argv], stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "RUST_LOG": "warn", **(env or {})})
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
        self.log.seek(0)
        sys.exit(f"{name} did not start:\n{self.log.read()}")

    def cpu_ticks(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    def switches(self):
        """Context switches of all the process's threads (voluntary + not)."""
        total = 0
        for task in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                with open(f"/proc/{self.proc.pid}/task/{task}/status") as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                            total += int(line.split()[1])
            except FileNotFoundError:
                pass
        return total

    def rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024
        return 0.0

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


def toolgate_config(upstream):
    return f"""[gateway]
listen = "127.0.0.1:0"
state_dir = "state"

[servers.parts]
url = "{upstream}"

[registry."parts__find_part"]
class = "automatic"
read_only = true

[callers.bench]
tenant = "bench"
anonymous = true
"""


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


def start_toolgate(name, binary, upstream, work, logs):
    home = os.path.join(work, name)
    os.makedirs(home)
    config = os.path.join(home, "toolgate.toml")
    with open(config, "w") as f:
        f.write(toolgate_config(upstream))
    server = Server(name, [binary, "serve", "--config", config], r"serving MCP on (\S+)", logs)
    server.state = os.path.join(home, "state")
    return server


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


def main():
    work, logs = workdir("bench-gateway-")
    servers = []
    try:
        upstream, relay = start_parts(work, logs, servers)
        gateway = start_toolgate("toolgate", TOOLGATE, upstream.url, work, logs)
        servers.append(gateway)
        legs = [Leg("direct", upstream.url, "find_part"), Leg("relay", relay.url, "find_part", relay),
                Leg("toolgate", gateway.url, "parts__find_part", gateway)]
        if BEFORE:
            before = start_toolgate("before", BEFORE, upstream.url, work, logs)
            servers.append(before)
            legs.append(Leg("before", before.url, "parts__find_part", before))
        # toolgate in front of the same server speaking 2025-11-25 only: one
        # legacy session, each answer an SSE stream (where a missing
        # TCP_NODELAY once cost 40 ms a call).
        legacy_upstream = Server("legacy-upstream", [TOOLGATE, "atlas", "parts", "--legacy", "--http", "127.0.0.1:0", "--state", os.path.join(work, "atlas-legacy")],
                                 r"serving parts on (\S+)", logs)
        servers.append(legacy_upstream)
        legacy = start_toolgate("legacy", TOOLGATE, legacy_upstream.url, work, logs)
        servers.append(legacy)
        legs.append(Leg("legacy", legacy.url, "parts__find_part", legacy, legacy_upstream))
        # Idle: started, its upstream listed, nothing called yet.
        time.sleep(3)
        idle = {leg.name: leg.hop.rss_mb() for leg in legs if leg.hop}
        sizes = {leg.name: call_once(leg.url, leg.tool) for leg in legs}
        print(f"toolgate bench-gateway — find_part on the Atlas parts server; {CPUS} cores: oha on cpu {LOAD_CPU}, servers on cpu {SERVER_CPUS}")
        print("   answer bytes: " + ", ".join(f"{k} {v}" for k, v in sizes.items()))
        print("   idle RSS: " + ", ".join(f"{k} {v:.1f} MB" for k, v in idle.items()) + f"; upstream {upstream.rss_mb():.1f} MB")
        run_phase(legs, upstream, 16, 1, 1)  # warm every path
        counted = {leg.name: 0 for leg in legs}
        # The fixed rate first, on a young ledger: after saturation the
        # gateway's disk is still writing back hundreds of MB, and that
        # writeback, not the gateway, would set every leg's tail.
        fixed = run_phase(legs, upstream, 32, RATE_SLICE, 2 * ROUNDS, RATE)
        show(f"fixed rate {RATE} calls/s (open loop), {2 * ROUNDS} slices of {RATE_SLICE:g} s per leg", fixed)
        for name, f in fixed.items():
            counted[name] += f["calls"]
        sat = {}
        for clients in (16, 64):
            sat[clients] = run_phase(legs, upstream, clients, SLICE, ROUNDS)
            show(f"saturation, {clients} clients, {ROUNDS} slices of {SLICE:g} s per leg", sat[clients])
            for name, f in sat[clients].items():
                counted[name] += f["calls"]
        print("   RSS under load (peak): " + ", ".join(f"{leg.name} {leg.rss_peak:.1f} MB" for leg in legs if leg.hop))
        # Every call toolgate answered has its receipt in the ledger.
        per_receipt = {}
        for leg in legs:
            if leg.name in ("toolgate", "before", "legacy"):
                n, per_receipt[leg.name] = receipts_in(leg.hop.state)
                answered = counted[leg.name]
                verdict = "every call has its receipt" if n >= answered else "RECEIPTS MISSING"
                print(f"   {leg.name}: {n} receipts in the ledger for {answered} calls timed (+ warm-up): {verdict}; {per_receipt[leg.name]:.0f} B/receipt stored")
                if n < answered:
                    sys.exit(1)
        g, r = fixed["toolgate"], fixed["relay"]
        best = max((sat[c]["toolgate"]["throughput"] / sat[c]["relay"]["throughput"], c) for c in sat)
        ratios = ", ".join(f"{sat[c]['toolgate']['throughput'] / sat[c]['relay']['throughput']:.2f}x at {c}" for c in sat)
        if BEFORE:
            b = fixed["before"]
            before_ratios = ", ".join(f"{sat[c]['before']['throughput'] / sat[c]['relay']['throughput']:.2f}x at {c}" for c in sat)
            print(f"\n   before/relay at saturation: {before_ratios}; at {RATE}/s {b['p50'] - r['p50']:+.2f} ms p50, {b['cpu_hop'] - r['cpu_hop']:.0f} us CPU/call over relay, "
                  f"{b['ctx_hop']:.2f} switches/call, {b['over5']} calls over 5 ms, max {b['max']:.1f} ms; {per_receipt['before']:.0f} B/receipt")
        print(f"\n   toolgate/relay at saturation: {ratios}; toolgate max at {RATE}/s {g['max']:.2f} ms ({g['over5']} calls over 5 ms)")
        l = fixed["legacy"]
        stall = "no stall" if l["p50"] < 5 else "STALLED"
        print(f"   through a legacy upstream (2025-11-25 session, SSE answers): {stall}; at {RATE}/s {l['p50'] - g['p50']:+.2f} ms p50 and "
              f"{l['p99'] - g['p99']:+.2f} ms p99 against the 2026-07-28 upstream, max {l['max']:.1f} ms, {l['over5']} calls over 5 ms")
        # The form: figures at the fixed rate unless said otherwise.
        print(f"toolgate/relay {best[0]:.2f}x at saturation; {g['p50'] - r['p50']:+.2f} ms p50, {g['p99'] - r['p99']:+.2f} ms p99 at {RATE}/s; "
              f"idle RSS {idle['toolgate']:.1f} MB; {g['cpu_hop'] - r['cpu_hop']:.0f} us CPU/call over relay; {g['ctx_hop']:.2f} switches/call; "
              f"{per_receipt['toolgate']:.0f} B/receipt; {g['over5']} calls over 5 ms (relay {r['over5']}), max {g['max']:.1f} ms")
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
