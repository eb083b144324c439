"""The approval acceptance flow with the official MCP Python SDK (mcp 2.3.0).

Usage: TOOLGATE_TOKEN=AGENT_TOKEN approval_flow.py URL TOOLGATE CONFIG ORDER_JSON

Against `toolgate demo --serve`, as a client that declared elicitation and
drives the input rounds itself: raise_parts_order, still pending after the
hold, answers input_required; the
named approver approves with `TOOLGATE approvals approve --config CONFIG ID
--as dana`; the re-issued call (new id, same params, requestState) returns an
order id; a second re-issue gets the recorded result and places no second order; a changed quantity under
the old requestState is not dispatched; send_notice to outside@example.test is
denied despite its readOnlyHint. Prints one JSON object of every step's wire
result; the Rust test asserts on it.
"""

import json
import subprocess
import sys

import anyio
from mcp import Client
from mcp_types import ElicitResult

from sdk_client import connect, wire

TOOL = "parts__raise_parts_order"


async def run(url: str, toolgate: str, config: str, order: dict) -> dict:
    steps = {}

    async def keep_waiting(context, params):
        return ElicitResult(action="accept", content={"wait": True})

    # A client that can ask its person, driving the rounds by hand.
    client = Client(connect(url, "2026-07-28").server, mode="2026-07-28", elicitation_callback=keep_waiting)
    async with client:
        await client.list_tools()
        call = client.session.call_tool
        first = await call(TOOL, order, allow_input_required=True)
        steps["first"] = wire(first)
        approval = steps["first"]["_meta"]["io.toolgate/approval"]["id"]
        state = first.request_state
        decided = subprocess.run(
            [toolgate, "approvals", "approve", "--config", config, approval, "--as", "dana", "--reason", "acceptance run", "--json"],
            capture_output=True, text=True, check=True,
        )
        steps["approved"] = json.loads(decided.stdout)
        steps["reissued"] = wire(await call(TOOL, order, request_state=state, input_responses={}, allow_input_required=True))
        steps["again"] = wire(await call(TOOL, order, request_state=state, input_responses={}, allow_input_required=True))
        changed = dict(order, quantity=order["quantity"] + 1)
        steps["changed"] = wire(await call(TOOL, changed, request_state=state, input_responses={}, allow_input_required=True))
        notice = {"to": "outside@example.test", "body": "Build passed."}
        steps["outside_notice"] = wire(await call("notices__send_notice", notice, allow_input_required=True))
    return steps


def main() -> int:
    url, toolgate, config, order = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    print(json.dumps(anyio.run(run, url, toolgate, config, order)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
