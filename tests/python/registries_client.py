"""The agent of the registries' acceptance test (crates/toolgate/tests/registries_import.rs):
the official MCP Python SDK (mcp 2.3.0) used as its README shows it —
`async with Client(url) as client`, `await client.list_tools()`,
`await client.call_tool(name, arguments)` — against a gateway that
`toolgate import` wrote from a Claude Desktop config.

Usage: registries_client.py URL CALLS
  CALLS: a JSON list of {"tool": NAME, "arguments": {...}, "save": PATH?}.

Lists the tools once, then makes each call in order, timing it (a held call
waits while the test, as the approver, decides). A call with "save" has its
answer written as a person would save it to prove it later:
PATH + ".plain.json" is `json.dumps(result.model_dump(by_alias=True,
mode="json"))`, PATH + ".exclude_none.json" the same with `exclude_none=True`.

Prints one JSON object: {"protocol_version", "tools": [names], "results":
[{"result": the answer with wire names and no nulls, "took_s"} or {"raised":
{type, message}, "took_s"}]}. A failure to connect or list prints
{"error": ...} and exits 1.
"""

import json
import sys
import time

from mcp import Client

from sdk_client import leaf, report, wire


async def run(url: str, calls: list) -> dict:
    async with Client(url) as client:
        listed = await client.list_tools()
        results = []
        for c in calls:
            started = time.monotonic()
            try:
                result = await client.call_tool(c["tool"], c["arguments"])
            except Exception as group:  # noqa: BLE001 - reported to the Rust side
                e = leaf(group)
                results.append({"raised": {"type": type(e).__name__, "message": str(e)}, "took_s": round(time.monotonic() - started, 2)})
                continue
            took = round(time.monotonic() - started, 2)
            if c.get("save"):
                with open(c["save"] + ".plain.json", "w", encoding="utf-8") as f:
                    f.write(json.dumps(result.model_dump(by_alias=True, mode="json")))
                with open(c["save"] + ".exclude_none.json", "w", encoding="utf-8") as f:
                    f.write(json.dumps(result.model_dump(by_alias=True, exclude_none=True, mode="json")))
            results.append({"result": wire(result), "took_s": took})
        return {"protocol_version": client.protocol_version, "tools": sorted(t.name for t in listed.tools), "results": results}


def main() -> int:
    url, calls = sys.argv[1], json.loads(sys.argv[2])
    return report(run, url, calls)


if __name__ == "__main__":
    sys.exit(main())
