"""Give up on a held call with the official MCP Python SDK (mcp 2.3.0) over
stdio, as anyio code does: the call runs inside a cancel scope that expires.
The SDK then sends `notifications/cancelled` (over stdio there is no stream
to close: the notification is all the gateway hears).

Usage: cancel_held.py MODE AFTER_S TOOL ARGUMENTS COMMAND [ARG…]
  Starts COMMAND as the server, calls TOOL with ARGUMENTS (JSON), gives up
  after AFTER_S seconds, then keeps the session open 2 s more.

Prints {"gave_up_after_s": S} or {"answered": RESULT}; {"error": ...} and exit 1 on failure.
"""

import json
import os
import sys
import time

import anyio
from mcp import Client, StdioServerParameters

from sdk_client import report, wire


async def run(mode: str, after: float, tool: str, arguments: dict, command: list) -> dict:
    server = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with Client(server, mode=mode) as client:
        started = time.monotonic()
        answered = None
        with anyio.move_on_after(after):
            answered = await client.call_tool(tool, arguments)
        if answered is not None:
            return {"answered": wire(answered)}
        gave_up = time.monotonic() - started
        await anyio.sleep(2)
        return {"gave_up_after_s": round(gave_up, 1)}


def main() -> int:
    mode, after, tool, arguments = sys.argv[1], float(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
    return report(run, mode, after, tool, arguments, sys.argv[5:])


if __name__ == "__main__":
    sys.exit(main())
