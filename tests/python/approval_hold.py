"""A call that needs approval, made the way the official MCP Python SDK's README
shows (mcp 2.3.0): `await client.call_tool(name, arguments)`, nothing more.

Usage: [TOOLGATE_TOKEN=…] approval_hold.py URL MODE PERSON TOOL ARGUMENTS [TIMES]
  MODE:    "2026-07-28", "legacy" or "auto".
  PERSON:  "absent" (the client declares no elicitation), or "declines" /
           "accepts" (an elicitation callback that answers so; a client
           that can ask its person).
  TIMES:   how many times the same call is made (default 1), as a client
           that lost an answer and retries would.

While toolgate holds the call, the Rust test decides (or not) from another
task. Each call asks for progress. Prints one JSON object: {"protocol_version",
"results": [...], "asked": [the elicitation messages the person was shown],
"progress": [the progress notifications received]}; a call that raised gives
{"raised": {"type", "message"}} in its place — the tests assert none does.
"""

import json
import sys

import anyio
from mcp import Client
from mcp_types import ElicitResult

from sdk_client import connect, leaf, wire


async def run(url: str, mode: str, person: str, tool: str, arguments: dict, times: int) -> dict:
    asked = []
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "total": total, "message": message})

    async def elicit(context, params):
        asked.append(params.message)
        if person == "declines":
            return ElicitResult(action="decline")
        return ElicitResult(action="accept", content={"wait": True})

    client = connect(url, mode)
    if person != "absent":
        client = Client(client.server, mode=mode, elicitation_callback=elicit)
    results = []
    async with client:
        for _ in range(times):
            try:
                results.append(wire(await client.call_tool(tool, arguments, progress_callback=on_progress)))
            except Exception as group:  # noqa: BLE001 - reported to the Rust side
                e = leaf(group)
                results.append({"raised": {"type": type(e).__name__, "message": str(e)}})
        return {"protocol_version": client.protocol_version, "results": results, "asked": asked, "progress": progress}


def main() -> int:
    url, mode, person, tool, arguments = sys.argv[1:6]
    times = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    print(json.dumps(anyio.run(run, url, mode, person, tool, json.loads(arguments), times)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
