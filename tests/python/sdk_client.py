"""Drive an MCP server with the official MCP Python SDK (mcp 2.3.0).

Usage: sdk_client.py URL MODE CALLS
  MODE:  "2026-07-28" (stateless core, no handshake), "legacy" (2025-11-25
         initialize handshake) or "auto" (server/discover probe, legacy fallback).
  CALLS: a JSON list of {"tool": NAME, "arguments": {...}}.

Lists the tools, makes each call, and prints one JSON object:
{"mode", "protocol_version", "tools": [...], "results": [...]} with wire field
names; a call that fails at the protocol level gives {"error": {code, message,
data}} in its place. A failure to connect prints {"error": ...} and exits 1.
The Rust tests run this and assert on the output.
"""

import json
import sys

import anyio
from mcp import Client, MCPError


def wire(model):
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


async def run(url: str, mode: str, calls: list) -> dict:
    async with Client(url, mode=mode) as client:
        listed = await client.list_tools()
        results = []
        for c in calls:
            try:
                results.append(wire(await client.call_tool(c["tool"], c["arguments"])))
            except MCPError as e:
                results.append({"error": {"code": e.code, "message": e.error.message, "data": e.error.data}})
        return {
            "mode": mode,
            "protocol_version": client.protocol_version,
            "tools": [wire(t) for t in listed.tools],
            "results": results,
        }


def leaf(exc: BaseException) -> BaseException:
    # anyio task groups wrap what the client raises.
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def main() -> int:
    url, mode, calls = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    try:
        out = anyio.run(run, url, mode, calls)
    except Exception as group:  # noqa: BLE001 - reported to the Rust side
        e = leaf(group)
        print(json.dumps({"error": {"type": type(e).__name__, "message": str(e)}}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
