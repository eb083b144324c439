"""One tool call with the official MCP Python SDK (mcp 2.3.0), the way its
README shows it (`Client(url)`, `await client.call_tool(name, arguments)`),
printing what the SDK hands the caller of the answer's `_meta`.

Usage: [TOOLGATE_TOKEN=…] answer_receipt.py URL MODE TOOL ARGUMENTS_JSON
Prints {"meta": result.meta, "is_error": result.is_error, "whole": …}, the
whole answer as the SDK's own model dumps it (`model_dump(by_alias=True,
exclude_none=True)`). The Rust tests prove the receipt in
`meta["io.toolgate/receipt"]` from the gateway's log, and the whole answer.
TOOLGATE_TOKEN, when set, is sent as `Authorization: Bearer`.
"""

import json
import sys

import anyio

from sdk_client import connect


async def run(url: str, mode: str, tool: str, arguments: dict) -> dict:
    async with connect(url, mode) as client:
        result = await client.call_tool(tool, arguments)
        whole = result.model_dump(by_alias=True, exclude_none=True, mode="json")
        return {"meta": result.meta, "is_error": result.is_error, "whole": whole}


def main() -> int:
    url, mode, tool, arguments = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    print(json.dumps(anyio.run(run, url, mode, tool, arguments)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
