"""Follow one resource with the official MCP Python SDK (mcp 2.3.0, 2026-07-28):
`client.listen(resource_subscriptions=[URI])`, as its README shows, while
a tool call makes the server change it.

Usage: [TOOLGATE_TOKEN=…] listen_resource.py URL URI TOOL ARGUMENTS
  Opens the listen stream for URI, then calls TOOL with ARGUMENTS (JSON)
  every 300 ms until a `notifications/resources/updated` arrives (the
  upstream's own subscription may take a moment to open), at most 15 s.

Prints one JSON object: {"updated": URI the event named, "calls": N}, or
{"error": ...} and exits 1.
"""

import json
import sys

import anyio
from mcp.client.subscriptions import ResourceUpdated

from sdk_client import connect, report


async def run(url: str, uri: str, tool: str, arguments: dict) -> dict:
    async with connect(url, "2026-07-28") as client:
        async with client.listen(resource_subscriptions=[uri]) as subscription:
            calls = 0
            found = None

            async def poke():
                nonlocal calls
                while True:
                    await client.call_tool(tool, arguments)
                    calls += 1
                    await anyio.sleep(0.3)

            with anyio.fail_after(15):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(poke)
                    async for event in subscription:
                        if isinstance(event, ResourceUpdated):
                            found = event.uri
                            break
                    tg.cancel_scope.cancel()
            return {"updated": found, "calls": calls}


def main() -> int:
    url, uri, tool, arguments = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    return report(run, url, uri, tool, arguments)


if __name__ == "__main__":
    sys.exit(main())
