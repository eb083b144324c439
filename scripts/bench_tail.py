#!/usr/bin/env python3
"""Where a tail comes from: toolgate against the bare relay at a fixed rate,
with the slow calls grouped into bursts and the gaps between the bursts.

A stall of the gateway's own shows as bursts at a steady gap (a second: the
signed checkpoint's work; a quarter: the WAL checkpointer), the machine's
noise as scattered calls that the relay has too. Run after
`scripts/bench-gateway` built the release binaries (it uses the same parts,
pinned the same way: the servers on one core, oha on the other):

    python3 scripts/bench_tail.py

Knobs (environment): SLICES (3) slices of SECS (10) seconds per leg,
alternated; BENCH_RATE (1000); STATE (toolgate's state_dir, e.g. on
/dev/shm to take the disk's syncs out); EXTRA (config text appended, e.g.
'[receipts]\\ncheckpoint_ms = 3600000\\ncheckpoint_every = 100000000' to
take the checkpoints out); TOOLGATE (another build); SHOWLOG (print the
lines of toolgate's log that contain it).
"""

import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gateway as b  # noqa: E402

SLICES = int(os.environ.get("SLICES", "3"))
SECS = float(os.environ.get("SECS", "10"))
EXTRA = os.environ.get("EXTRA", "").replace("\\n", "\n")
BINARY = os.environ.get("TOOLGATE", b.TOOLGATE)
BURST_GAP_S = 0.02


def calls(url, tool, seconds, rate):
    """One slice at `rate`, open loop: (start, latency) of each call, in s."""
    argv = [b.OHA, "--no-tui", "--output-format", "csv", "-z", f"{seconds}s", "-c", "32", "-m", "POST", "-d", b.body(tool)]
    for k, v in b.headers(tool).items():
        argv += ["-H", f"{k}: {v}"]
    argv += ["-q", str(rate), "--latency-correction", "--no-color", url]
    out = subprocess.run(["taskset", "-c", b.LOAD_CPU, *argv], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines()[1:]:
        cols = line.split(",")
        if len(cols) >= 7:
            if cols[6] != "200":
                sys.exit(f"{url}: status {cols[6]}")
            rows.append((float(cols[0]), float(cols[4])))
    return rows


def show(name, rows):
    """Prints the slice; returns its calls over 5 ms and its max (ms)."""
    slow = sorted(start for start, took in rows if took > 0.005)
    bursts, last = [], None
    for start in slow:
        if last is None or start - last > BURST_GAP_S:
            bursts.append(start)
        last = start
    gaps = [round(later - earlier, 2) for earlier, later in zip(bursts, bursts[1:])]
    lat = sorted(took for _, took in rows)
    print(f"  {name:<9} {len(rows)} calls, p50 {lat[len(lat) // 2] * 1e3:.3f} ms, {len(slow)} over 5 ms in {len(bursts)} bursts, "
          f"max {lat[-1] * 1e3:.1f} ms; gaps between bursts (s): {gaps[:12]}", flush=True)
    return len(slow), lat[-1] * 1e3


def main():
    work, logs = b.workdir("bench-tail-")
    servers = []
    try:
        upstream, relay = b.start_parts(work, logs, servers)
        home = os.path.join(work, "toolgate")
        os.makedirs(home)
        config = b.toolgate_config(upstream.url)
        if os.environ.get("STATE"):
            config = config.replace('state_dir = "state"', f'state_dir = "{os.environ["STATE"]}"')
        path = os.path.join(home, "toolgate.toml")
        with open(path, "w") as f:
            f.write(config + EXTRA)
        gateway = b.Server("toolgate", [BINARY, "serve", "--config", path], r"serving MCP on (\S+)", logs)
        servers.append(gateway)
        legs = [("relay", relay.url, "find_part"), ("toolgate", gateway.url, "parts__find_part")]
        for _, url, tool in legs:
            b.call_once(url, tool)
            calls(url, tool, 2, b.RATE)
        total = {name: [0, 0.0] for name, _, _ in legs}
        for _ in range(SLICES):
            for name, url, tool in legs:
                over, worst = show(name, calls(url, tool, SECS, b.RATE))
                total[name][0] += over
                total[name][1] = max(total[name][1], worst)
        print("in all: " + "; ".join(f"{name} {over} calls over 5 ms, max {worst:.1f} ms" for name, (over, worst) in total.items()))
    finally:
        for s in servers:
            s.stop()
        if os.environ.get("SHOWLOG"):
            with open(os.path.join(logs, "toolgate.log")) as f:
                for line in f:
                    if os.environ["SHOWLOG"] in line:
                        print("   ", line.rstrip())
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
