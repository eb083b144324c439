"""Drive an MCP server with the official MCP Python SDK (mcp 2.3.0).

Usage: [TOOLGATE_TOKEN=…] sdk_client.py URL MODE CALLS
  MODE:  "2026-07-28" (stateless core, no handshake), "legacy" (2025-11-25
         initialize handshake) or "auto" (server/discover probe, legacy fallback).
  CALLS: a JSON list of {"tool": NAME, "arguments": {...}}.

TOOLGATE_TOKEN, when set, is sent as `Authorization: Bearer`. A call that
answers input_required (MRTR) is returned as it is, not driven further.

Lists the tools, makes each call, and prints one JSON object:
{"mode", "protocol_version", "tools": [...], "results": [...]} with wire field
names; a call that fails at the protocol level gives {"error": {code, message,
data}} in its place. A failure to connect prints {"error": ...} and exits 1.
The Rust tests run this and assert on the output.
"""

import json
import os
import sys

import anyio
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def wire(model):
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def connect(url: str, mode: str, token: str | None = None) -> Client:
    """A stock client of `url` in `mode`, sending `token` (default:
    TOOLGATE_TOKEN, when set) as `Authorization: Bearer`."""
    token = token or os.environ.get("TOOLGATE_TOKEN")
    if not token:
        return Client(url, mode=mode)
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(url, http_client=http), mode=mode)


async def run(url: str, mode: str, calls: list) -> dict:
    async with connect(url, mode) as client:
        listed = await client.list_tools()
        results = []
        for c in calls:
            try:
                results.append(wire(await client.session.call_tool(c["tool"], c["arguments"], allow_input_required=True)))
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


def report(run, *args) -> int:
    """Runs `run(*args)` under anyio and prints its JSON result, or the
    error as {"error": {type, message}}; returns the exit status."""
    try:
        out = anyio.run(run, *args)
    except Exception as group:  # noqa: BLE001 - reported to the Rust side
        e = leaf(group)
        print(json.dumps({"error": {"type": type(e).__name__, "message": str(e)}}))
        return 1
    print(json.dumps(out))
    return 0


def main() -> int:
    url, mode, calls = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    return report(run, url, mode, calls)


if __name__ == "__main__":
    sys.exit(main())
