"""What a server says unprompted, heard with the official MCP Python SDK
(mcp 2.3.0) used as its README shows: resource updates after
`subscribe_resource` (legacy), and list changes (`message_handler` in the
legacy era, `client.listen(tools_list_changed=True)` in 2026-07-28).

Usage: [TOOLGATE_TOKEN=…] notices.py TARGET MODE ACTION ARGS
  TARGET: an http(s) URL, or a JSON list [COMMAND, ARG…] to run over stdio.
  MODE:   "legacy" or "2026-07-28".
  ACTION "subscribe" ARGS = JSON list of {"uri", "tool", "arguments"}:
    subscribes to each uri, calls its tool every 300 ms until the update
    arrives (at most 15 s each), then unsubscribes from the first and calls
    its tool three more times. Prints {"updated": [uri…], "after_unsubscribe": N}.
  ACTION "lists" ARGS = N: prints {"ready": true} once connected, then waits
    (at most 30 s) for N `notifications/tools/list_changed` and prints
    {"list_changed": N}.

A failure prints {"error": ...} and exits 1.
"""

import json
import os
import sys
import warnings

import anyio
from mcp import Client, StdioServerParameters, types
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared._httpx_utils import create_mcp_http_client

from sdk_client import report

warnings.simplefilter("ignore")  # subscribe_resource is deprecated for 2026-07-28


def client(target, mode: str, handler) -> Client:
    if isinstance(target, list):
        server = StdioServerParameters(command=target[0], args=target[1:], env=dict(os.environ))
        return Client(server, mode=mode, message_handler=handler)
    token = os.environ.get("TOOLGATE_TOKEN")
    if not token:
        return Client(target, mode=mode, message_handler=handler)
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(target, http_client=http), mode=mode, message_handler=handler)


async def subscribe(target, mode: str, wanted: list) -> dict:
    seen: list[str] = []
    arrived = anyio.Event()

    async def handler(message):
        nonlocal arrived
        if isinstance(message, types.ResourceUpdatedNotification):
            seen.append(message.params.uri)
            arrived.set()

    async with client(target, mode, handler) as c:
        updated = []
        for w in wanted:
            await c.subscribe_resource(w["uri"])
            with anyio.fail_after(15):
                while w["uri"] not in seen:
                    arrived = anyio.Event()
                    await c.call_tool(w["tool"], w["arguments"])
                    with anyio.move_on_after(0.3):
                        await arrived.wait()
            updated.append(w["uri"])
        first = wanted[0]
        await c.unsubscribe_resource(first["uri"])
        before = seen.count(first["uri"])
        for _ in range(3):
            await c.call_tool(first["tool"], first["arguments"])
            await anyio.sleep(0.3)
        return {"updated": updated, "after_unsubscribe": seen.count(first["uri"]) - before}


async def lists(target, mode: str, n: int) -> dict:
    count = 0
    done = anyio.Event()

    def heard():
        nonlocal count
        count += 1
        if count >= n:
            done.set()

    async def handler(message):
        # In 2026-07-28 the listen stream's events are counted (they are also
        # passed to this handler).
        if mode == "legacy" and isinstance(message, types.ToolListChangedNotification):
            heard()

    async with client(target, mode, handler) as c:
        with anyio.fail_after(30):
            if mode == "legacy":
                await c.list_tools()
                print(json.dumps({"ready": True}), flush=True)
                await done.wait()
            else:
                async with c.listen(tools_list_changed=True) as sub:
                    print(json.dumps({"ready": True}), flush=True)
                    async for event in sub:
                        if isinstance(event, ToolsListChanged):
                            heard()
                            if done.is_set():
                                break
        return {"list_changed": count}


def main() -> int:
    raw, mode, action, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    target = json.loads(raw) if raw.startswith("[") else raw
    if action == "subscribe":
        return report(subscribe, target, mode, args)
    return report(lists, target, mode, args)


if __name__ == "__main__":
    sys.exit(main())
