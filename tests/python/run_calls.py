"""Make calls through toolgate with the official MCP Python SDK (mcp 2.3.0),
each with the client's default `call_tool` and the `_meta` it names (e.g.
the agent run, `io.toolgate/run`): nothing by hand.

Usage: [TOOLGATE_TOKEN=…] run_calls.py URL MODE CALLS
  MODE:  "2026-07-28" or "legacy".
  CALLS: a JSON list of {"tool": NAME, "arguments": {...}, "meta": {...}}.

Prints one JSON object: {"results": [...]}, each the result with wire field
names, {"error": {code, message}} where the call failed at the protocol
level, or {"threw": MESSAGE} where the SDK itself raised. The Rust tests run this and assert on the output.
"""

import json
import sys

import anyio
from mcp import MCPError

from sdk_client import connect


async def run(url: str, mode: str, calls: list) -> dict:
    results = []
    async with connect(url, mode) as client:
        for c in calls:
            try:
                result = await client.call_tool(c["tool"], c["arguments"], meta=c.get("meta"))
                results.append(result.model_dump(by_alias=True, mode="json", exclude_none=True))
            except MCPError as e:
                results.append({"error": {"code": e.code, "message": e.error.message}})
            except Exception as e:  # noqa: BLE001 - what the SDK raised itself (e.g. an output-schema check)
                results.append({"threw": f"{type(e).__name__}: {e}"})
    return {"results": results}


def main() -> None:
    url, mode, calls = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    print(json.dumps(anyio.run(run, url, mode, calls)))


if __name__ == "__main__":
    main()
