"""Read an MCP server's prompts, resources and completions with the official
MCP Python SDK (mcp 2.3.0), as its README shows: list_resources,
list_resource_templates, read_resource, list_prompts, get_prompt, complete.

Usage: content_client.py URL MODE STEPS
  MODE:  "2026-07-28", "legacy" or "auto" (as sdk_client.py).
  STEPS: a JSON list, each one of
         {"read": URI} | {"get": NAME, "arguments": {...}} |
         {"complete_prompt": NAME, "argument": NAME, "value": TEXT} |
         {"complete_template": URI_TEMPLATE, "argument": NAME, "value": TEXT}

Prints one JSON object: {"protocol_version", "resources", "templates",
"prompts", "results"} with wire field names; a step that fails at the
protocol level gives {"error": {code, message, data}} in its place.
"""

import json
import sys

from mcp import MCPError
from mcp.types import PromptReference, ResourceTemplateReference

from sdk_client import connect, report, wire


async def step(client, s):
    if "read" in s:
        return await client.read_resource(s["read"])
    if "get" in s:
        return await client.get_prompt(s["get"], s.get("arguments"))
    if "complete_prompt" in s:
        ref = PromptReference(type="ref/prompt", name=s["complete_prompt"])
        return await client.complete(ref, {"name": s["argument"], "value": s["value"]})
    ref = ResourceTemplateReference(type="ref/resource", uri=s["complete_template"])
    return await client.complete(ref, {"name": s["argument"], "value": s["value"]})


async def run(url: str, mode: str, steps: list) -> dict:
    async with connect(url, mode) as client:
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        prompts = await client.list_prompts()
        results = []
        for s in steps:
            try:
                results.append(wire(await step(client, s)))
            except MCPError as e:
                results.append({"error": {"code": e.code, "message": e.error.message, "data": e.error.data}})
        return {
            "protocol_version": client.protocol_version,
            "resources": [wire(r) for r in resources.resources],
            "templates": [wire(t) for t in templates.resource_templates],
            "prompts": [wire(p) for p in prompts.prompts],
            "results": results,
        }


def main() -> int:
    url, mode, steps = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    return report(run, url, mode, steps)


if __name__ == "__main__":
    sys.exit(main())
