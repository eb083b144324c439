"""One stock client session (the official MCP Python SDK, mcp 2.3.0) that
lists the tools, then waits while the Rust test reloads the gateway's config
(SIGHUP), then lists them again and makes calls — `client.list_tools()` and
`client.call_tool(name, arguments)`, as the SDK's README shows.

Usage: [TOOLGATE_TOKEN=…] reload_client.py URL MODE [listen]
With `listen` (2026-07-28), the session follows the tool list's changes
(`client.listen(tools_list_changed=True)`, as the SDK's docs show): a
change evicts the list the client keeps for its `ttlMs`.
Reads from stdin, one line each:
  {"list": true}                        → prints {"tools": [names]}
  {"call": NAME, "arguments": {...}}    → prints {"result": …} or {"error": …}
  (end of input)                        → exits
Prints one JSON line per request, flushed, so the test can act between them.
"""

import json
import sys

import anyio
from mcp import MCPError

from sdk_client import connect, leaf, wire


async def run(url: str, mode: str, listen: bool) -> None:
    async with connect(url, mode) as client:
        if not listen:
            await serve(client)
            return
        async with client.listen(tools_list_changed=True):
            await serve(client)


async def serve(client) -> None:
    while True:
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        if not line:
            return
        request = json.loads(line)
        if request.get("list"):
            listed = await client.list_tools()
            out = {"tools": sorted(t.name for t in listed.tools)}
        else:
            try:
                out = {"result": wire(await client.call_tool(request["call"], request.get("arguments", {})))}
            except MCPError as e:
                out = {"error": {"code": e.code, "message": e.error.message}}
        print(json.dumps(out), flush=True)


def main() -> None:
    try:
        anyio.run(run, sys.argv[1], sys.argv[2], sys.argv[3:] == ["listen"])
    except BaseException as e:  # noqa: BLE001 - report what the SDK raised
        e = leaf(e)
        print(json.dumps({"raised": {"type": type(e).__name__, "message": str(e)}}), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
