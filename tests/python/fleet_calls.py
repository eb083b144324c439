"""Calls fired at once through several gateway replicas with the official MCP
Python SDK (mcp 2.3.0): the stock client's `call_tool`, nothing by hand. For
the fleet test of upstream identity (crates/toolgate/tests/connect_fleet.rs,
issue 61): one person's calls landing on every replica in the same moment,
so that their grant's refresh is wanted by all of them at once.

Usage: TOOLGATE_TOKEN=… fleet_calls.py [--at EPOCH_MS] MODE TOOL URL [URL…]
  --at: call no sooner than this wall-clock time (ms since the epoch), so
        that the interpreter's start is no part of when the calls land.
  MODE: "2026-07-28" or "legacy" (the 2025-11-25 initialize handshake).
  Each URL is one client (name a URL three times for three clients of it).
  The clients declare no elicitation: a person without a grant gets the tool
  error `connect_required`.

Every client connects (and, in the legacy era, initializes) first; once all
have, or failed to, it prints {"ready": N} (N: how many connected), waits
for --at if given, and all call TOOL together, each at most 90 s. Then it prints, last:
  {"results": [{"url", "ms", and one of "result": RESULT (wire field names),
                "error": {code, message, data}, "threw": MESSAGE}], …]}
in the order of the URLs, and exits 0 (what each call came to is the Rust
side's to judge).
"""

import json
import sys
import time

import anyio
from mcp import MCPError

from sdk_client import connect, leaf, wire


def say(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


async def run(mode: str, tool: str, urls: list[str], at_ms: int | None) -> list[dict]:
    results: list[dict | None] = [None] * len(urls)
    waiting = len(urls)
    connected = 0
    ready = anyio.Event()
    go = anyio.Event()

    def arrived(ok: bool) -> None:
        nonlocal waiting, connected
        waiting -= 1
        connected += ok
        if waiting == 0:
            say({"ready": connected})
            ready.set()

    async def starter() -> None:
        await ready.wait()
        if at_ms is not None:
            await anyio.sleep(max(0.0, at_ms / 1000 - time.time()))
        go.set()

    async def one(i: int, url: str) -> None:
        counted = False
        try:
            async with connect(url, mode) as client:
                counted = True
                arrived(True)
                await go.wait()
                started = time.monotonic()
                ms = lambda: round((time.monotonic() - started) * 1000)  # noqa: E731
                try:
                    with anyio.fail_after(90):
                        result = await client.call_tool(tool, {})
                    results[i] = {"url": url, "ms": ms(), "result": wire(result)}
                except MCPError as e:
                    results[i] = {"url": url, "ms": ms(), "error": {"code": e.code, "message": e.error.message, "data": e.error.data}}
        except Exception as group:  # noqa: BLE001 - reported to the Rust side
            e = leaf(group)
            if not counted:
                arrived(False)
            if results[i] is None:  # not a failure to close after the answer
                results[i] = {"url": url, "ms": None, "threw": f"{type(e).__name__}: {e}"}

    async with anyio.create_task_group() as tg:
        tg.start_soon(starter)
        for i, url in enumerate(urls):
            tg.start_soon(one, i, url)
    return results


def main() -> int:
    args = sys.argv[1:]
    at_ms = None
    if args[:1] == ["--at"] and len(args) > 1:
        at_ms, args = int(args[1]), args[2:]
    if len(args) < 3 or args[0] not in ("legacy", "2026-07-28"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, tool, urls = args[0], args[1], args[2:]
    say({"results": anyio.run(run, mode, tool, urls, at_ms)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
