"""Drive a gateway with the official MCP Python SDK (mcp 2.3.0), waiting for
boxed servers that are still starting (an `npx -y`/`uvx` start fetches its
package first): the sandbox tests (crates/toolgate/tests/sandbox*.rs).

Usage: [TOOLGATE_TOKEN=…] sandbox_client.py URL WAIT_S CALLS
  CALLS: a JSON list of {"tool": NAME, "arguments": {...}}.

Lists the tools (legacy handshake) until every tool CALLS names is listed or
WAIT_S seconds pass, then makes each call in order with `session.call_tool`,
and prints one JSON object: {"waited_s", "missing": [...], "tools": [...],
"results": [...]} with wire field names. A tool still missing after WAIT_S is
not called (its result is {"missing": NAME}); a call that fails at the
protocol level gives {"error": {code, message, data}}.
"""

import json
import sys
import time

import anyio
from mcp import MCPError

from sdk_client import connect, report, wire


async def run(url: str, wait_s: float, calls: list) -> dict:
    started = time.monotonic()
    wanted = {c["tool"] for c in calls}
    async with connect(url, "legacy") as client:
        while True:
            listed = await client.list_tools()
            names = {t.name for t in listed.tools}
            missing = sorted(wanted - names)
            if not missing or time.monotonic() - started > wait_s:
                break
            await anyio.sleep(0.5)
        waited = round(time.monotonic() - started, 1)
        results = []
        for c in calls:
            if c["tool"] in missing:
                results.append({"missing": c["tool"]})
                continue
            try:
                results.append(wire(await client.session.call_tool(c["tool"], c["arguments"], allow_input_required=True)))
            except MCPError as e:
                results.append({"error": {"code": e.code, "message": e.error.message, "data": e.error.data}})
        return {"waited_s": waited, "missing": missing, "tools": sorted(names), "results": results}


def main() -> int:
    url, wait_s, calls = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
    return report(run, url, wait_s, calls)


if __name__ == "__main__":
    sys.exit(main())
