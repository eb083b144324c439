"""Everything an MCP server lists, read with the official MCP Python SDK
(mcp 2.3.0) as a client reads it: list_tools, list_prompts, list_resources
and list_resource_templates, each followed through every page (nextCursor).

Usage: [TOOLGATE_TOKEN=…] list_all.py URL MODE
  MODE: "2026-07-28", "legacy" or "auto" (as sdk_client.py).

Prints one JSON object: {"protocol_version", "tools", "prompts",
"resources", "templates"}, each list the names a client is given (a tool's
or prompt's `name`, a resource's `uri`, a template's `uriTemplate`), in the
order listed.
"""

import json
import sys

from sdk_client import connect, report


async def every_page(list_page, items_of, name_of):
    names, cursor = [], None
    while True:
        page = await list_page(cursor=cursor)
        names.extend(name_of(item) for item in items_of(page))
        cursor = page.next_cursor
        if not cursor:
            return names


async def run(url: str, mode: str) -> dict:
    async with connect(url, mode) as client:
        tools = await every_page(client.list_tools, lambda p: p.tools, lambda t: t.name)
        prompts = await every_page(client.list_prompts, lambda p: p.prompts, lambda p: p.name)
        resources = await every_page(client.list_resources, lambda p: p.resources, lambda r: str(r.uri))
        templates = await every_page(client.list_resource_templates, lambda p: p.resource_templates, lambda t: t.uri_template)
        return {
            "protocol_version": client.protocol_version,
            "tools": tools,
            "prompts": prompts,
            "resources": resources,
            "templates": templates,
        }


def main() -> int:
    url, mode = sys.argv[1], sys.argv[2]
    return report(run, url, mode)


if __name__ == "__main__":
    sys.exit(main())
