"""A forward HTTP proxy that can hold one person's token refresh: the network
between one gateway replica and the authorization server in the fleet test
of upstream identity (crates/toolgate/tests/connect_fleet.rs, issue 61).
The replica is started with HTTP_PROXY naming it, so every plain-HTTP
request the replica makes (to the upstream, to the authorization server)
comes through here.

Usage: hold_proxy.py --hold-sub SUB [--client ID:SECRET]

Every request is relayed to where its absolute URI points, one request per
connection (`Connection: close` both ways), the answer streamed back as it
comes. While armed, a POST to an authorization server's `/token` with
grant_type=refresh_token whose refresh token belongs to SUB is held instead:
the proxy asks the authorization server whose token it is (RFC 7662
introspection, as the client ID:SECRET; introspection spends nothing), and
for SUB's it neither relays the request nor answers it. When the replica
goes away (the test SIGKILLs it; or it gives up on its own), the held request
is dropped, never relayed: that refresh token was not spent at the server.

Commands, one a line on stdin: "hold" arms, "relay" disarms. End of input
ends the proxy.
Prints on stdout: `listening on http://127.0.0.1:PORT` once it serves, then
`armed` / `relaying` as each command takes effect, `held SUB` when it holds
a refresh and `dropped SUB` when that request's client went away. Everything else goes to stderr.
"""

import argparse
import asyncio
import base64
import json
import os
import sys
import threading
import time
import urllib.parse
import urllib.request

# Headers of one hop, never relayed (the proxy sets its own Connection).
HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization"}
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def say(line: str) -> None:
    print(line, flush=True)


def note(line: str) -> None:
    stamp = time.strftime("%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}"
    print(f"{stamp} hold_proxy: {line}", file=sys.stderr, flush=True)


def one_hop(head: bytes, first: str | None = None) -> bytes:
    """`head` (a request's or answer's, to its blank line) with the hop
    headers dropped, `Connection: close` added, and its first line `first`."""
    lines = head.decode("latin-1").split("\r\n")
    kept = [line for line in lines[1:] if line and line.split(":", 1)[0].strip().lower() not in HOP]
    return "\r\n".join([first or lines[0], *kept, "Connection: close", "", ""]).encode("latin-1")


def headers_of(head: bytes) -> dict[str, str]:
    out = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            out[k.strip().lower()] = v.strip()
    return out


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass


class Proxy:
    def __init__(self, hold_sub: str, client: str) -> None:
        self.hold_sub = hold_sub
        self.basic = "Basic " + base64.b64encode(client.encode()).decode()
        self.armed = False
        self.introspection: dict[str, str] = {}  # issuer origin → its endpoint

    def whose(self, origin: str, refresh_token: str) -> str | None:
        """The `sub` of a refresh token, by the authorization server's
        introspection (blocking: run in a thread)."""
        if origin not in self.introspection:
            with NO_PROXY.open(f"{origin}/.well-known/openid-configuration", timeout=10) as r:
                self.introspection[origin] = json.load(r)["introspection_endpoint"]
        body = urllib.parse.urlencode({"token": refresh_token, "token_type_hint": "refresh_token"}).encode()
        req = urllib.request.Request(self.introspection[origin], data=body, headers={"Authorization": self.basic, "Content-Type": "application/x-www-form-urlencoded"})
        with NO_PROXY.open(req, timeout=10) as r:
            answer = json.load(r)
        return answer.get("sub") if answer.get("active") else None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self.relay(reader, writer)
        except Exception as e:  # noqa: BLE001 - one connection's trouble is not the proxy's
            note(f"{type(e).__name__}: {e}")
        finally:
            writer.close()

    async def relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return
        method, target, version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        url = urllib.parse.urlsplit(target)
        if method == "CONNECT" or url.scheme != "http" or not url.hostname:
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        body = b""
        length = headers_of(head).get("content-length")
        if method == "POST" and url.path.endswith("/token") and length:
            body = await reader.readexactly(int(length))
            form = urllib.parse.parse_qs(body.decode("latin-1"))
            if self.armed and form.get("grant_type") == ["refresh_token"] and form.get("refresh_token"):
                origin = f"http://{url.netloc}"
                try:
                    sub = await asyncio.to_thread(self.whose, origin, form["refresh_token"][0])
                except Exception as e:  # noqa: BLE001 - then it is relayed
                    note(f"introspection failed ({type(e).__name__}: {e}): relaying")
                    sub = None
                if sub == self.hold_sub:
                    say(f"held {sub}")
                    # Neither relayed nor answered: wait for the client to go.
                    try:
                        while await reader.read(65536):
                            pass
                    except (ConnectionError, OSError):
                        pass
                    say(f"dropped {sub}")
                    return
        token_call = None
        if method == "POST" and url.path.endswith("/token"):
            # Which grant, never a token: for reading a failure's timeline.
            token_call = f"POST {url.path} ({urllib.parse.parse_qs(body.decode('latin-1')).get('grant_type', ['?'])[0]})"
            note(f"relaying {token_call}")
        path = url.path or "/"
        if url.query:
            path += "?" + url.query
        try:
            up_reader, up_writer = await asyncio.open_connection(url.hostname, url.port or 80)
        except OSError as e:
            note(f"{target}: {e}")
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        up_writer.write(one_hop(head, f"{method} {path} {version}") + body)
        upward = asyncio.create_task(pipe(reader, up_writer))
        try:
            answer = await up_reader.readuntil(b"\r\n\r\n")
            if token_call:
                note(f"{token_call}: {answer.split(b' ', 2)[1].decode('latin-1')}")
            writer.write(one_hop(answer))
            await writer.drain()
            await pipe(up_reader, writer)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            upward.cancel()
            up_writer.close()


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hold-sub", required=True, help="whose refresh is held when armed (the token's sub)")
    p.add_argument("--client", default="toolgate:toolgate-secret", help="ID:SECRET for introspection")
    args = p.parse_args()
    proxy = Proxy(args.hold_sub, args.client)
    server = await asyncio.start_server(proxy.serve, "127.0.0.1", 0)
    say(f"listening on http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    loop = asyncio.get_running_loop()

    def arm(on: bool) -> None:
        proxy.armed = on
        say("armed" if on else "relaying")

    def commands() -> None:
        for line in sys.stdin:
            word = line.strip()
            if word in ("hold", "relay"):
                loop.call_soon_threadsafe(arm, word == "hold")
        os._exit(0)  # stdin closed: the test is done with us

    threading.Thread(target=commands, daemon=True).start()
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
