"""One tool call (or prompt get, or resource read) with the official MCP
Python SDK (mcp 2.3.0), the way its README shows it (`Client(url)`, `await
client.call_tool(name, arguments)`), printing what the SDK hands the caller
of the answer's `_meta`, and the answer as the SDK's own dumps save it.

Usage: [TOOLGATE_TOKEN=…] answer_receipt.py URL MODE TOOL ARGUMENTS_JSON
TOOL is a tool's name, or `prompt:NAME` (`client.get_prompt(NAME, ARGUMENTS)`)
or `resource:URI` (`client.read_resource(URI)`).
Prints {"meta": result.meta, "is_error": result.is_error, "whole": …,
"forms": {…}}: `whole` is the whole answer as `model_dump(by_alias=True,
exclude_none=True)` gives it; `forms` holds the text each of the ways a user
saves a result writes, verbatim:
  exclude_none              json.dumps(result.model_dump(by_alias=True, exclude_none=True))
  plain                     json.dumps(result.model_dump(by_alias=True))
  model_dump_json           result.model_dump_json()
  model_dump_json_by_alias  result.model_dump_json(by_alias=True)
The Rust tests prove the receipt in `meta["io.toolgate/receipt"]` from the
gateway's log, and each saved form with `toolgate verify --answer`.
TOOLGATE_TOKEN, when set, is sent as `Authorization: Bearer`.
"""

import json
import sys

import anyio

from sdk_client import connect


async def run(url: str, mode: str, tool: str, arguments: dict) -> dict:
    async with connect(url, mode) as client:
        if tool.startswith("prompt:"):
            result = await client.get_prompt(tool.removeprefix("prompt:"), arguments or None)
        elif tool.startswith("resource:"):
            result = await client.read_resource(tool.removeprefix("resource:"))
        else:
            result = await client.call_tool(tool, arguments)
        whole = result.model_dump(by_alias=True, exclude_none=True, mode="json")
        forms = {
            "exclude_none": json.dumps(result.model_dump(by_alias=True, exclude_none=True)),
            "plain": json.dumps(result.model_dump(by_alias=True)),
            "model_dump_json": result.model_dump_json(),
            "model_dump_json_by_alias": result.model_dump_json(by_alias=True),
        }
        return {"meta": result.meta, "is_error": getattr(result, "is_error", None), "whole": whole, "forms": forms}


def main() -> int:
    url, mode, tool, arguments = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    print(json.dumps(anyio.run(run, url, mode, tool, arguments)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
