"""The upstream peer of toolgate's upstream-identity tests (issue 61): an MCP
server (the official Python SDK, mcp 2.3.0, streamable HTTP) whose one tool,
`whoami`, says as whom the call reached it. Two ways to know that:

OAuth (toolgate's `oauth` and `exchange` modes) — the SDK's own resource-server
support (`AuthSettings` + a `TokenVerifier`):

    whoami_server.py --port 0 --issuer http://127.0.0.1:PROVIDER [--resource URL] [--scopes mcp] [--stateless]

  Without a valid bearer token every request gets 401 with
  `WWW-Authenticate: Bearer ..., resource_metadata="<RFC 9728 metadata URL>"`, and
  the metadata names --issuer as its authorization server. A token is a JWT access
  token (RFC 9068, typ at+jwt) verified with PyJWT against the issuer's JWKS (found
  through its discovery document): signature, `iss`, `aud` = --resource (default
  http://127.0.0.1:PORT/mcp, the server's own URL), `exp`. `whoami` returns
  {"sub", "act"} (`act` null without one), as JSON text and structuredContent.
  No scope is required unless --scopes lists some: then the metadata's
  scopes_supported names them and a token without them gets 403.
  The SDK binds a session to the (client_id, iss, sub) that opened it: a request
  for another person on that session gets 404; --stateless serves without sessions.

Assertion (toolgate's `assertion` mode; the spec is /tmp/tg/identity-spec.md):

    whoami_server.py --port 0 --assertion-jwks URL --assertion-issuer ISS \
        [--audience AUD] [--header X-Toolgate-Identity] [--require-assertion]
    whoami_server.py stdio --assertion-jwks URL --assertion-issuer ISS --audience AUD

  The gateway's EdDSA JWT, from the header (HTTP) or from the request's
  params._meta["io.toolgate/identity"] (stdio), verified with PyJWT against the
  gateway's /.well-known/jwks.json: the key named by `kid`, alg EdDSA, `iss`,
  `aud` (default: the server's own URL), `exp` (5 s leeway), and a lifetime of at
  most 300 s. `whoami` returns {"sub", "tenant", "act"}. A missing or refused
  assertion makes `whoami` a tool error that says why ("identity assertion
  refused: expired", "... wrong audience ..."); with --require-assertion every
  HTTP request without a valid one gets 401 with the reason instead.

A person's own process (toolgate's `identity.env`, the GitHub server's way):

    whoami_server.py stdio --issuer URL --token-env VAR --resource URI

  Reads the access token from the environment variable VAR (set when the
  process starts), verified as in OAuth mode with aud = URI, at each call:
  `whoami` returns {"sub", "act", "pid"} — the pid tells one person's process
  from another's.

Prints `listening on http://127.0.0.1:PORT/mcp` on stdout once it serves (stdio:
nothing); exits when stdin closes or on SIGTERM.
"""

import argparse
import json
import os
import signal
import socket
import sys
import threading
import urllib.request
from typing import Annotated, Any, NotRequired, TypedDict

import anyio
import jwt
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent

META_KEY = "io.toolgate/identity"
LEEWAY = 5


class WhoAmI(TypedDict):
    sub: str
    act: dict[str, Any] | None
    tenant: NotRequired[str | None]
    pid: NotRequired[int]


class Refused(Exception):
    """Why a token or an assertion is not accepted; its text is safe to show."""


def verify(token: str, keys: jwt.PyJWKClient, *, issuer: str, audience: str, algorithms: list[str],
           typ: str | None = None, max_lifetime: int | None = None) -> dict[str, Any]:
    """PyJWT's checks, each failure turned into a short reason."""
    try:
        header = jwt.get_unverified_header(token)
        if header.get("alg") not in algorithms:
            raise Refused(f"alg {header.get('alg')!r} is not {' or '.join(algorithms)}")
        if typ and str(header.get("typ", "")).lower() not in (typ, f"application/{typ}"):
            raise Refused(f"typ {header.get('typ')!r} is not {typ}")
        key = keys.get_signing_key_from_jwt(token)
        claims = jwt.decode(token, key, algorithms=algorithms, audience=audience, issuer=issuer,
                            leeway=LEEWAY, options={"require": ["exp", "iss", "aud", "sub"]})
    except jwt.ExpiredSignatureError:
        raise Refused("expired") from None
    except jwt.InvalidAudienceError:
        aud = jwt.decode(token, options={"verify_signature": False}).get("aud")
        raise Refused(f"wrong audience ({aud!r}, expected {audience!r})") from None
    except jwt.InvalidIssuerError:
        raise Refused(f"wrong issuer (expected {issuer!r})") from None
    except jwt.PyJWKClientError as exc:
        raise Refused(f"no key for it in the JWKS ({exc})") from None
    except jwt.PyJWTError as exc:
        raise Refused(f"invalid ({type(exc).__name__}: {exc})") from None
    if max_lifetime is not None and claims["exp"] - claims.get("iat", 0) > max_lifetime:
        raise Refused(f"lifetime over {max_lifetime} s")
    return claims


class JwtVerifier:
    """The SDK's TokenVerifier protocol: JWT access tokens from the issuer."""

    def __init__(self, issuer: str, resource: str):
        self.issuer, self.resource = issuer.rstrip("/"), resource
        self._keys: jwt.PyJWKClient | None = None

    def keys(self) -> jwt.PyJWKClient:
        if self._keys is None:  # discovery once, on first use: the provider may start later
            try:
                with urllib.request.urlopen(f"{self.issuer}/.well-known/openid-configuration", timeout=5) as r:
                    self._keys = jwt.PyJWKClient(json.load(r)["jwks_uri"], lifespan=60)
            except (OSError, ValueError, KeyError) as exc:
                raise Refused(f"cannot read the issuer's discovery document ({exc})") from None
        return self._keys

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            claims = await anyio.to_thread.run_sync(lambda: verify(
                token, self.keys(), issuer=self.issuer, audience=self.resource,
                algorithms=["RS256", "PS256", "ES256", "EdDSA"], typ="at+jwt"))
        except Refused as why:
            print(f"whoami: bearer token refused: {why}", file=sys.stderr, flush=True)
            return None
        return AccessToken(token=token, client_id=str(claims.get("client_id", "")),
                           scopes=str(claims.get("scope", "")).split(), expires_at=int(claims["exp"]),
                           resource=self.resource, subject=str(claims["sub"]), claims=claims)


def result(who: WhoAmI) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(who))], structured_content=dict(who))


def refused(why: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=f"identity assertion refused: {why}")], is_error=True)


def build(args: argparse.Namespace, url: str) -> MCPServer:
    if args.token_env:
        verifier = JwtVerifier(args.issuer, args.resource)
        server = MCPServer("whoami", log_level="WARNING")

        @server.tool(description="As whom this process runs: the sub of the access token in its environment.")
        async def whoami(ctx: Context) -> Annotated[CallToolResult, WhoAmI]:
            token = os.environ.get(args.token_env, "")
            checked = await verifier.verify_token(token) if token else None
            if checked is None:
                return CallToolResult(content=[TextContent(type="text", text=f"access token refused (from ${args.token_env})")], is_error=True)
            claims = checked.claims or {}
            return result({"sub": claims["sub"], "act": claims.get("act"), "pid": os.getpid()})

        return server

    if args.assertion_jwks:
        keys = jwt.PyJWKClient(args.assertion_jwks, lifespan=60)
        audience = args.audience or url

        def check(assertion: str | None) -> dict[str, Any]:
            if not assertion:
                raise Refused("missing" + (f" (no {args.header} header)" if url else f" (no _meta[{META_KEY!r}])"))
            return verify(assertion, keys, issuer=args.assertion_issuer, audience=audience,
                          algorithms=["EdDSA"], max_lifetime=300)

        server = MCPServer("whoami", log_level="WARNING")
        server.check_assertion = check  # type: ignore[attr-defined]  (for --require-assertion)

        @server.tool(description="As whom this call reached the server: the identity assertion's sub, tenant and act.")
        async def whoami(ctx: Context) -> Annotated[CallToolResult, WhoAmI]:
            if ctx.headers is not None:
                assertion = ctx.headers.get(args.header.lower())
            else:
                assertion = (ctx.request_context.meta or {}).get(META_KEY)
            try:
                claims = await anyio.to_thread.run_sync(check, assertion)
            except Refused as why:
                return refused(str(why))
            return result({"sub": claims["sub"], "tenant": claims.get("tenant"), "act": claims.get("act")})

        return server

    verifier = JwtVerifier(args.issuer, args.resource or url)
    auth = AuthSettings(issuer_url=args.issuer, resource_server_url=verifier.resource,
                        required_scopes=args.scopes.split() if args.scopes else None,
                        validate_token_resource=False)  # the verifier checks `aud` itself
    server = MCPServer("whoami", token_verifier=verifier, auth=auth, log_level="WARNING")

    @server.tool(description="As whom this call reached the server: the access token's sub and act.")
    async def whoami(ctx: Context) -> Annotated[CallToolResult, WhoAmI]:
        user = ctx.request_context.request.scope.get("user")
        assert isinstance(user, AuthenticatedUser)  # RequireAuthMiddleware let nothing else through
        claims = user.access_token.claims or {}
        return result({"sub": claims["sub"], "act": claims.get("act")})

    return server


def require_assertion(app, server: MCPServer, header: str):
    """ASGI wrapper for --require-assertion: 401 with the reason, before the SDK sees the request."""
    async def wrapped(scope, receive, send):
        if scope["type"] == "http":
            value = dict(scope["headers"]).get(header.lower().encode(), b"").decode() or None
            try:
                await anyio.to_thread.run_sync(server.check_assertion, value)  # type: ignore[attr-defined]
            except Refused as why:
                body = json.dumps({"error": "invalid_identity_assertion", "error_description": str(why)}).encode()
                challenge = f'{header} error="invalid_token", error_description="{why}"'.replace("\n", " ")
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", challenge.encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)
    return wrapped


def exit_with_stdin() -> None:
    """Exit when stdin closes (the test that started us is gone), or on SIGTERM."""
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

    def watch() -> None:
        while sys.stdin.buffer.read1(4096):
            pass
        os._exit(0)
    threading.Thread(target=watch, daemon=True).start()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("transport", nargs="?", choices=["http", "stdio"], default="http")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--issuer", help="OAuth mode: the authorization server (oidc-provider)")
    p.add_argument("--resource", help="OAuth mode: this server's resource URI (default http://127.0.0.1:PORT/mcp)")
    p.add_argument("--scopes", help="OAuth mode: scopes (space-separated) the metadata lists and tokens must carry")
    p.add_argument("--stateless", action="store_true", help="serve without MCP sessions")
    p.add_argument("--assertion-jwks", help="assertion mode: the gateway's JWKS URL")
    p.add_argument("--assertion-issuer", help="assertion mode: the gateway's issuer")
    p.add_argument("--audience", help="assertion mode: the expected aud (default: this server's URL)")
    p.add_argument("--header", default="X-Toolgate-Identity", help="assertion mode: the header it comes in")
    p.add_argument("--require-assertion", action="store_true", help="assertion mode: 401 on every request without one")
    p.add_argument("--token-env", help="stdio, a person's own process: the variable the access token is in (with --issuer, --resource)")
    args = p.parse_args()
    if bool(args.assertion_jwks) == bool(args.issuer) or bool(args.assertion_jwks) != bool(args.assertion_issuer):
        p.error("give either --issuer (OAuth) or --assertion-jwks with --assertion-issuer (assertion)")
    if args.transport == "stdio":
        if args.token_env:
            if not (args.issuer and args.resource):
                p.error("--token-env needs --issuer and --resource")
        elif not (args.assertion_jwks and args.audience):
            p.error("stdio serves assertion mode (with --audience) or a token from --token-env")
        build(args, "").run("stdio")  # stdin closing ends it
        return 0

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", args.port))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    server = build(args, url)
    app = server.streamable_http_app(host="127.0.0.1", stateless_http=args.stateless)
    if args.require_assertion:
        app = require_assertion(app, server, args.header)
    config = uvicorn.Config(app, host="127.0.0.1", log_level="warning")
    exit_with_stdin()

    async def serve() -> None:
        userver = uvicorn.Server(config)
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: userver.serve(sockets=[sock]))
            while not userver.started:
                await anyio.sleep(0.02)
            print(f"listening on {url}", flush=True)
    anyio.run(serve)
    return 0


if __name__ == "__main__":
    sys.exit(main())
