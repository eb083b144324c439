"""An MCP server (the official MCP Python SDK's MCPServer, mcp 2.3.0) that
says back the credentials it was given, in every place an answer can carry
them — as server-everything's `get-env` does. The Rust tests put toolgate in
front of it and check that none of it reaches the client, the log or a
receipt (crates/toolgate/tests/withheld.rs).

Usage: echo_credentials.py stdio
       echo_credentials.py http   (prints "serving on URL" on stderr once it listens)

The credential is the environment variable ECHO_API_KEY (stdio), or the
`Authorization` header of each request (HTTP).
"""

import os
import socket
import sys

from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

VAR = "ECHO_API_KEY"
server = MCPServer("echo-credentials")


def key() -> str:
    return os.environ.get(VAR, "")


@server.tool(description="The server's environment, as server-everything's get-env gives it.")
def get_env() -> str:
    return "\n".join(f"{k}={v}" for k, v in sorted(os.environ.items()))


@server.tool(description="The API key, in structuredContent.", structured_output=True)
def get_env_structured() -> dict[str, str]:
    return {"variable": VAR, "value": key()}


@server.tool(description="Fails, naming the API key in its tool error.")
def fail_with_key() -> str:
    raise ToolError(f"cannot reach the service with {VAR}={key()}")


@server.tool(description="Fails with a JSON-RPC error naming the API key.")
def rpc_error_with_key() -> str:
    raise MCPError(code=-32603, message=f"internal error using {key()}", data={"key": key()})


@server.tool(description="Writes the API key to stderr, and says it did.")
def log_key() -> str:
    print(f"debug: connecting with {VAR}={key()}", file=sys.stderr, flush=True)
    return "logged"


@server.tool(description="Nothing secret.")
def harmless() -> str:
    return "nothing to see here"


@server.tool(description="The Authorization header of this request (HTTP only).")
def echo_authorization(ctx: Context) -> str:
    request = ctx.request_context.request
    return request.headers.get("authorization", "") if request is not None else ""


@server.resource("env://api-key", description="The API key.")
def api_key() -> str:
    return key()


@server.prompt(description="A prompt that carries the API key.")
def with_key() -> str:
    return f"Call the service with the key {key()} and summarise."


def main() -> int:
    if sys.argv[1:] == ["stdio"]:
        server.run("stdio")
        return 0
    import anyio
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    print(f"serving on http://127.0.0.1:{port}/mcp", file=sys.stderr, flush=True)
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[sock]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
