"""Drive an Atlas server with the official MCP Python SDK (mcp 2.3.0).

Usage: sdk_client.py URL MODE TOOL JSON_ARGS
  MODE: "2026-07-28" (stateless core, no handshake), "legacy" (2025-11-25
  initialize handshake) or "auto" (server/discover probe, legacy fallback).

Lists the tools, calls TOOL with JSON_ARGS, then calls TOOL with an argument
its schema forbids, and prints one JSON object with what came back (wire field
names). Protocol failures print {"error": ...} and exit 1. The Rust test
`python_sdk.rs` runs this and asserts on the output.
"""

import json
import sys

import anyio
from mcp import Client, MCPError


def wire(model):
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


async def run(url: str, mode: str, tool: str, args: dict) -> dict:
    async with Client(url, mode=mode) as client:
        listed = await client.list_tools()
        good = await client.call_tool(tool, args)
        bad = await client.call_tool(tool, {**args, "not_in_the_schema": True})
        return {
            "mode": mode,
            "protocol_version": client.protocol_version,
            "tools": [wire(t) for t in listed.tools],
            "call": wire(good),
            "invalid_call": wire(bad),
        }


def leaf(exc: BaseException) -> BaseException:
    # anyio task groups wrap what the client raises.
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def main() -> int:
    url, mode, tool, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    try:
        out = anyio.run(run, url, mode, tool, args)
    except Exception as group:  # noqa: BLE001 - reported to the Rust side
        e = leaf(group)
        if isinstance(e, MCPError):
            err = {"code": e.code, "message": e.error.message}
        else:
            err = {"type": type(e).__name__, "message": str(e)}
        print(json.dumps({"error": err}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
