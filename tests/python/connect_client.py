"""One tool call through toolgate with the official MCP Python SDK (mcp 2.3.0),
as a person whose server is reached with their own OAuth grant (`identity.mode =
"oauth"`, issue 61): the stock client's `call_tool`, nothing by hand.

Usage: TOOLGATE_TOKEN=… connect_client.py URL MODE TOOL [--arguments JSON] [--elicit]
  MODE:       "2026-07-28" or "legacy" (the 2025-11-25 initialize handshake).
  --elicit:   give the client an `elicitation_callback`, so that it declares
              elicitation (form and url). Without it the client declares none.

TOOLGATE_TOKEN, when set, is sent as `Authorization: Bearer`.

Prints JSON lines on stdout, each flushed:
  {"elicit": PARAMS}  each time the SDK calls the elicitation callback (the
      2026-07-28 era's `input_required` with a URL-mode request): the request's
      params with wire field names (`mode`, `url`, `message`, …). The callback then
      waits for one line on stdin: "done" (the consent happened: it answers
      accept, and the SDK re-issues the call), "decline" (decline); end of input or
      anything else answers cancel. So the test that runs this opens the URL in a
      browser, consents, and writes "done".
  and last, one of:
  {"result": RESULT, "elicited": [PARAMS…]}  the call's result (wire field names);
  {"error": {"code", "message", "data"}, "elicitations": [...], "elicited": [...]}
      a JSON-RPC error; for -32042 (URL elicitation required, the 2025-11-25 era)
      `elicitations` is what the SDK's own `UrlElicitationRequiredError.from_error`
      reads from it (wire field names), or {"unreadable": why};
  {"threw": MESSAGE, "elicited": [...]}  anything else the SDK raised (exit 1).
The Rust test (crates/toolgate/tests/connect.rs) runs this and asserts on it.
"""

import argparse
import json
import os
import sys

import anyio
import mcp_types as types
from mcp import Client, MCPError, UrlElicitationRequiredError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from sdk_client import leaf


def wire(model) -> dict:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def say(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def client(url: str, mode: str, callback) -> Client:
    """Like `sdk_client.connect`, with the elicitation callback (or none)."""
    token = os.environ.get("TOOLGATE_TOKEN")
    server = url
    if token:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        server = streamable_http_client(url, http_client=http)
    return Client(server, mode=mode, elicitation_callback=callback)


async def run(url: str, mode: str, tool: str, arguments: dict, elicit: bool) -> dict:
    elicited: list[dict] = []

    async def on_elicit(context, params: types.ElicitRequestParams) -> types.ElicitResult:
        shown = wire(params)
        elicited.append(shown)
        say({"elicit": shown})
        answer = (await anyio.to_thread.run_sync(sys.stdin.readline)).strip()
        action = {"done": "accept", "decline": "decline"}.get(answer, "cancel")
        return types.ElicitResult(action=action)

    async with client(url, mode, on_elicit if elicit else None) as c:
        try:
            result = await c.call_tool(tool, arguments)
        except MCPError as e:
            out = {"error": {"code": e.code, "message": e.error.message, "data": e.error.data}, "elicited": elicited}
            if e.code == types.URL_ELICITATION_REQUIRED:
                try:
                    out["elicitations"] = [wire(x) for x in UrlElicitationRequiredError.from_error(e.error).elicitations]
                except Exception as why:  # noqa: BLE001 - what the stock SDK cannot read is the finding
                    out["elicitations"] = {"unreadable": f"{type(why).__name__}: {why}"}
            return out
        return {"result": wire(result), "elicited": elicited}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("mode", choices=["legacy", "2026-07-28"])
    p.add_argument("tool")
    p.add_argument("--arguments", default="{}", help="the call's arguments, a JSON object")
    p.add_argument("--elicit", action="store_true", help="declare elicitation (an elicitation_callback)")
    args = p.parse_args()
    arguments = json.loads(args.arguments)
    if not isinstance(arguments, dict):
        p.error("--arguments takes a JSON object")
    try:
        out = anyio.run(run, args.url, args.mode, args.tool, arguments, args.elicit)
    except Exception as group:  # noqa: BLE001 - reported to the Rust side
        e = leaf(group)
        say({"threw": f"{type(e).__name__}: {e}"})
        return 1
    say(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
