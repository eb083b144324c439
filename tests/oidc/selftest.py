"""Self-test of the identity peers (issue 61): oidc-provider (provider.mjs) and the
whoami MCP server (tests/python/whoami_server.py), run for real, talking to each
other and to the stock MCP Python SDK client. Proves the peers, not toolgate.

    .venv-sdk/bin/python tests/oidc/selftest.py      (from the checkout's root)

Runs `npm ci` in tests/oidc first when node_modules is missing. Checks:
  - a gateway stand-in: an Ed25519 key published as a JWKS by a tiny local HTTP
    server, and assertions signed with it as the spec says (EdDSA, kid = RFC 7638
    thumbprint, iss/aud/sub/tenant/act/jti/iat/exp);
  - whoami (OAuth) answers 401 with resource_metadata, and the metadata names the
    provider;
  - token exchange (client_secret_basic and _post) of an assertion, with an actor
    token, gives a JWT for the resource with sub and act; the stock client calling
    whoami with it sees that sub and act; an expired or untrusted subject token, a
    wrong secret, and a token for another resource are refused; the provider's own
    access token is exchangeable too;
  - Enterprise-Managed Authorization (ID-JAG) across two providers, an IdP and the
    MCP server's authorization server (AS): hop 1 at the IdP (token exchange for an
    ID-JAG: typ, claims, signed with the IdP's /jwks key), hop 2 at the AS (JWT bearer
    grant: an access token whose sub/aud/act whoami accepts); a wrong aud, an
    untrusted issuer, an expired ID-JAG, a wrong typ, another client's ID-JAG and the
    AS's own ID-JAG are refused with invalid_grant;
  - dynamic registration (RFC 7591), then — without a browser, by posting the
    interaction forms — authorization code + PKCE + resource, refresh rotation
    (a spent refresh token revokes the grant), revocation (RFC 7009);
  - whoami in assertion mode (HTTP header and stdio _meta): sub, tenant, act; a
    missing, expired or wrong-audience assertion is a tool error saying so, and a
    401 with --require-assertion;
  - a Client ID Metadata Document client (--cimd) served over https on 127.0.0.1.
Prints one line per check; exits 1 at the first failure.
"""

import base64
import hashlib
import json
import os
import re
import secrets
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlparse

import anyio
import httpx2 as httpx  # the HTTP client the SDK itself ships (mcp 2.3.0 depends on httpx2)
import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
WHOAMI = ROOT / "tests/python/whoami_server.py"
CLIENT, SECRET = "toolgate", "toolgate-secret"
TX = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
AT_TYPE = "urn:ietf:params:oauth:token-type:access_token"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
children: list[subprocess.Popen] = []


def ok(what: str) -> None:
    print(f"ok  {what}", flush=True)


def check(cond: bool, what: str, detail: object = "") -> None:
    if not cond:
        print(f"FAIL {what}: {detail}", flush=True)
        raise SystemExit(1)
    ok(what)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def start(cmd: list[str], env: dict | None = None) -> str:
    """Start a peer; return the URL of its `listening on URL` line. Its stdin stays
    open (a pipe) for as long as this script runs: closing it stops the peer."""
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                         env={**os.environ, **(env or {})})
    children.append(p)
    line = p.stdout.readline()
    m = re.match(r"listening on (\S+)", line)
    if not m:
        raise SystemExit(f"FAIL {cmd[:2]} did not start: {line!r}")
    return m.group(1)


def serve(handler_body, tls: ssl.SSLContext | None = None) -> str:
    """A tiny HTTP(S) server on 127.0.0.1 answering GET with handler_body(path) -> (status, json)."""
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            status, body = handler_body(self.path)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    if tls:
        srv.socket = tls.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"{'https' if tls else 'http'}://127.0.0.1:{srv.server_address[1]}"


class Gateway:
    """What toolgate publishes and signs with, per the spec."""

    def __init__(self):
        self.key = ed25519.Ed25519PrivateKey.generate()
        x = b64(self.key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))
        thumb = json.dumps({"crv": "Ed25519", "kty": "OKP", "x": x}, separators=(",", ":"), sort_keys=True)
        self.kid = b64(hashlib.sha256(thumb.encode()).digest())
        jwks = {"keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": self.kid, "use": "sig", "alg": "EdDSA"}]}
        self.url = serve(lambda path: (200, jwks) if path == "/.well-known/jwks.json" else (404, {}))
        self.jwks = f"{self.url}/.well-known/jwks.json"

    def assertion(self, sub, aud, *, tenant="acme", agent="agent-7", ttl=120, iss=None, key=None, **extra):
        now = int(time.time())
        claims = {"iss": iss or self.url, "aud": aud, "sub": sub, "tenant": tenant, "jti": b64(secrets.token_bytes(16)),
                  "iat": now, "exp": now + ttl, **({"act": {"sub": agent}} if agent else {}), **extra}
        return jwt.encode(claims, key or self.key, algorithm="EdDSA", headers={"kid": self.kid, "typ": "JWT"})


async def whoami(url: str, token: str | None = None, *, headers: dict | None = None, mode: str = "legacy"):
    h = dict(headers or {})
    if token:
        h["Authorization"] = f"Bearer {token}"
    async with Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=h)), mode=mode) as c:
        return await c.call_tool("whoami", {})


def exchange(http: httpx.Client, issuer: str, subject: str, resource: str, *, actor: str | None = None,
             post: bool = False, secret: str = SECRET, subject_type: str = JWT_TYPE):
    form = {"grant_type": TX, "subject_token": subject, "subject_token_type": subject_type, "resource": resource}
    if actor:
        form |= {"actor_token": actor, "actor_token_type": JWT_TYPE}
    if post:
        form |= {"client_id": CLIENT, "client_secret": secret}
        return http.post(f"{issuer}/token", data=form)
    return http.post(f"{issuer}/token", data=form, auth=(CLIENT, secret))


def authorize(http: httpx.Client, issuer: str, client_id: str, redirect: str, resource: str, login: str,
              scope: str | None = "mcp"):
    """The authorization code flow as a browser would do it: follow redirects, post the
    #login form, then the consent form; returns the code and its verifier."""
    verifier = b64(secrets.token_bytes(32))
    state = b64(secrets.token_bytes(8))
    r = http.get(f"{issuer}/auth", params={
        "client_id": client_id, "response_type": "code", "redirect_uri": redirect, "resource": resource,
        "state": state, "code_challenge_method": "S256", "code_challenge": b64(hashlib.sha256(verifier.encode()).digest()),
        **({"scope": scope} if scope else {})})
    for _ in range(10):
        if r.status_code in (302, 303):
            loc = urljoin(str(r.url), r.headers["location"])
            if loc.startswith(redirect):
                q = parse_qs(urlparse(loc).query)
                if "error" in q:
                    raise SystemExit(f"FAIL authorization: {q}")
                assert q["state"] == [state] and q["iss"] == [issuer], q
                return q["code"][0], verifier
            r = http.get(loc)
        elif r.status_code == 200 and 'id="login-form"' in r.text:
            assert 'id="login"' in r.text and 'id="submit"' in r.text
            r = http.post(urljoin(str(r.url), re.search(r'action="([^"]+)"', r.text).group(1)), data={"login": login})
        elif r.status_code == 200 and 'id="consent-form"' in r.text:
            assert 'id="submit"' in r.text and 'id="deny"' in r.text
            r = http.post(urljoin(str(r.url), re.search(r'action="([^"]+)"', r.text).group(1)), data={})
        elif "/session/end/confirm" in r.text:  # another person's session ends (a browser's JS submits it)
            fields = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', r.text))
            r = http.post(re.search(r'action="([^"]+)"', r.text).group(1), data=fields)
        else:
            raise SystemExit(f"FAIL authorization: {r.status_code} {r.text[:400]}")
    raise SystemExit("FAIL authorization: too many steps")


def claims(token: str) -> dict:
    return jwt.decode(token, options={"verify_signature": False})


def verified(token: str, jwks_url: str, **kw) -> dict:
    """The token's claims, its signature checked against jwks_url (kw: audience=..., issuer=...)."""
    key = jwt.PyJWKClient(jwks_url).get_signing_key_from_jwt(token)
    return jwt.decode(token, key, algorithms=["RS256"], options={"verify_aud": "audience" in kw}, **kw)


async def id_jag_checks(http: httpx.Client, gw: Gateway) -> None:
    """Enterprise-Managed Authorization: hop 1 (token exchange for an ID-JAG) at one
    provider, the IdP; hop 2 (JWT bearer grant) at another, the MCP server's AS."""
    as_client, as_secret = "toolgate-at-as", "as-secret"
    idp = start(["node", str(HERE / "provider.mjs"), "--port", "0", "--trust-issuer", gw.url, "--trust-jwks", gw.jwks,
                 "--idjag-client-id", as_client])
    # A second trusted IdP, a stand-in that signs whatever the test needs (an expired ID-JAG).
    standin = Gateway()
    # The AS trusts gw too, only so that it can be asked for an ID-JAG of its own.
    as_ = start(["node", str(HERE / "provider.mjs"), "--port", "0", "--client", f"{as_client}:{as_secret}",
                 "--client", "other:other-secret", "--trust-idjag-issuer", idp, "--trust-idjag-jwks", f"{idp}/jwks",
                 "--trust-idjag-issuer", standin.url, "--trust-idjag-jwks", standin.jwks,
                 "--trust-issuer", gw.url, "--trust-jwks", gw.jwks])
    ok(f"ID-JAG: IdP up at {idp}, AS up at {as_}")
    mcp = start([sys.executable, str(WHOAMI), "--port", "0", "--issuer", as_])
    meta = http.get(f"{idp}/.well-known/oauth-authorization-server").json()
    check(ID_JAG in meta.get("identity_chaining_requested_token_types_supported", []),
          "ID-JAG: IdP metadata lists id-jag (identity_chaining_requested_token_types_supported)", meta)
    meta = http.get(f"{as_}/.well-known/oauth-authorization-server").json()
    check(JWT_BEARER in meta["grant_types_supported"], "ID-JAG: AS metadata lists the jwt-bearer grant", meta)

    def hop1(subject, audience, *, issuer=idp, resource=None, scope=None, actor=None, subject_type=JWT_TYPE,
             auth=(CLIENT, SECRET)):
        form = {"grant_type": TX, "requested_token_type": ID_JAG, "subject_token": subject,
                "subject_token_type": subject_type}
        form |= {k: v for k, v in {"audience": audience, "resource": resource, "scope": scope}.items() if v}
        if actor:
            form |= {"actor_token": actor, "actor_token_type": JWT_TYPE}
        return http.post(f"{issuer}/token", data=form, auth=auth)

    def hop2(assertion, *, resource=None, auth=(as_client, as_secret)):
        form = {"grant_type": JWT_BEARER, "assertion": assertion, **({"resource": resource} if resource else {})}
        return http.post(f"{as_}/token", data=form, auth=auth)

    def refused(r, what, reason, error="invalid_grant"):
        check(r.status_code == 400 and r.json().get("error") == error and reason in r.json().get("error_description", ""),
              f"ID-JAG hop 2: {what} refused ({error}, {reason!r})", r.text)

    # Hop 1: the gateway's assertion (subject) and the agent (actor) for an ID-JAG.
    r = hop1(gw.assertion("alice", idp), as_, resource=mcp, scope="mcp", actor=gw.assertion("agent-7", idp, agent=None))
    check(r.status_code == 200, "ID-JAG hop 1 (token exchange at the IdP): 200", r.text)
    body = r.json()
    check(body["issued_token_type"] == ID_JAG and body["token_type"] == "N_A" and body["expires_in"] == 300
          and body.get("scope") == "mcp" and "refresh_token" not in body, "ID-JAG hop 1: the draft's answer", body)
    grant = body["access_token"]
    header = jwt.get_unverified_header(grant)
    jag = verified(grant, f"{idp}/jwks", audience=as_, issuer=idp)
    check(header["typ"] == "oauth-id-jag+jwt" and header["alg"] == "RS256"
          and jag["sub"] == "alice" and jag["aud"] == as_ and jag["client_id"] == as_client and jag["resource"] == mcp
          and jag["scope"] == "mcp" and jag["act"] == {"sub": "agent-7"} and jag["jti"] and jag["exp"] - jag["iat"] == 300,
          "ID-JAG hop 1: typ oauth-id-jag+jwt, signed with the IdP's /jwks key, iss/sub/aud/client_id/resource/scope/act/jti/iat/exp",
          (header, jag))
    r = hop1(gw.assertion("alice", idp), None, resource=mcp)
    check(r.status_code == 400 and "audience" in r.json().get("error_description", ""),
          "ID-JAG hop 1: audience is required", r.text)
    own = exchange(http, idp, gw.assertion("bob", idp, agent=None), "http://127.0.0.1:1/idp-api").json()["access_token"]
    r = hop1(own, as_, subject_type=AT_TYPE)
    check(r.status_code == 200 and claims(r.json()["access_token"])["sub"] == "bob"
          and "resource" not in claims(r.json()["access_token"]) and "act" not in claims(r.json()["access_token"]),
          "ID-JAG hop 1: the IdP's own access token as subject (access_token type), no resource", r.text)
    bob_grant = r.json()["access_token"]

    # Hop 2: the ID-JAG for an access token at the AS.
    r = hop2(grant)
    check(r.status_code == 200, "ID-JAG hop 2 (jwt-bearer at the AS, client_secret_basic): 200", r.text)
    body = r.json()
    at = verified(body["access_token"], f"{as_}/jwks", audience=mcp, issuer=as_)
    check(body["token_type"] == "Bearer" and body["scope"] == "mcp" and "refresh_token" not in body
          and jwt.get_unverified_header(body["access_token"])["typ"] == "at+jwt"
          and at["sub"] == "alice" and at["aud"] == mcp and at["client_id"] == as_client and at["scope"] == "mcp"
          and at["act"] == {"sub": "agent-7"}, "ID-JAG hop 2: JWT access token (AS /jwks), sub alice, aud the resource, act", at)
    res = await whoami(mcp, body["access_token"])
    check(res.structured_content == {"sub": "alice", "act": {"sub": "agent-7"}}, "ID-JAG: stock client calls whoami as alice", res)
    r = hop2(bob_grant, resource=mcp)
    check(r.status_code == 200 and claims(r.json()["access_token"])["sub"] == "bob" and claims(r.json()["access_token"])["aud"] == mcp,
          "ID-JAG hop 2: resource from the parameter when the ID-JAG names none", r.text)
    r = hop2(bob_grant)
    refused(r, "no resource anywhere", "resource is required", "invalid_target")
    r = hop2(grant, resource="http://127.0.0.1:1/elsewhere")
    refused(r, "a resource the ID-JAG does not grant", "not one the ID-JAG grants", "invalid_target")

    # Refusals.
    r = hop2(hop1(gw.assertion("alice", idp), "http://127.0.0.1:1/another-as", resource=mcp).json()["access_token"])
    refused(r, "wrong aud", "is not this authorization server")
    untrusted = start(["node", str(HERE / "provider.mjs"), "--port", "0", "--trust-issuer", gw.url, "--trust-jwks", gw.jwks,
                       "--idjag-client-id", as_client])
    r = hop1(gw.assertion("alice", untrusted), as_, issuer=untrusted, resource=mcp)
    check(r.status_code == 200, "ID-JAG: an untrusted IdP issues one", r.text)
    refused(hop2(r.json()["access_token"]), "untrusted issuer", "is not a trusted IdP")

    def standin_jag(ttl=300, typ="oauth-id-jag+jwt", **extra):
        now = int(time.time())
        payload = {"iss": standin.url, "sub": "alice", "aud": as_, "client_id": as_client, "resource": mcp,
                   "jti": b64(secrets.token_bytes(16)), "iat": now - 600, "exp": now + ttl, **extra}
        return jwt.encode(payload, standin.key, algorithm="EdDSA", headers={"kid": standin.kid, "typ": typ})

    r = hop2(standin_jag())
    check(r.status_code == 200 and claims(r.json()["access_token"])["sub"] == "alice",
          "ID-JAG hop 2: a second trusted IdP (repeated --trust-idjag-issuer/--trust-idjag-jwks) works", r.text)
    refused(hop2(standin_jag(ttl=-60)), "expired ID-JAG", "expired")
    refused(hop2(standin_jag(typ="JWT")), "wrong typ", "typ must be oauth-id-jag+jwt")
    refused(hop2(grant, auth=("other", "other-secret")), "another client's ID-JAG", "is not the authenticated client")
    r = hop1(gw.assertion("alice", as_), as_, issuer=as_, resource=mcp, auth=(as_client, as_secret))
    check(r.status_code == 200, "ID-JAG: the AS (trusting gw) issues one for itself", r.text)
    refused(hop2(r.json()["access_token"]), "the AS's own ID-JAG", "this authorization server itself")
    r = hop2(grant, auth=(as_client, "wrong"))
    check(r.status_code == 401 and r.json()["error"] == "invalid_client", "ID-JAG hop 2: wrong client secret refused", r.text)


async def main() -> None:
    if not (HERE / "node_modules/oidc-provider").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True)
    gw = Gateway()
    issuer = start(["node", str(HERE / "provider.mjs"), "--port", "0", "--access-ttl", "60",
                    "--trust-issuer", gw.url, "--trust-jwks", gw.jwks])
    ok(f"provider up at {issuer}")
    mcp = start([sys.executable, str(WHOAMI), "--port", "0", "--issuer", issuer])
    ok(f"whoami (OAuth) up at {mcp}")
    http = httpx.Client(timeout=10)

    # RFC 9728: the 401 names the metadata, the metadata names the provider.
    r = http.post(mcp, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                  headers={"accept": "application/json, text/event-stream"})
    m = re.search(r'resource_metadata="([^"]+)"', r.headers.get("www-authenticate", ""))
    check(r.status_code == 401 and m is not None, "whoami: 401 with resource_metadata", r.headers)
    prm = http.get(m.group(1)).json()
    check(prm["resource"] == mcp and prm["authorization_servers"] == [issuer], "whoami: metadata names the provider", prm)
    meta = http.get(f"{issuer}/.well-known/oauth-authorization-server").json()
    check(TX in meta["grant_types_supported"] and meta["code_challenge_methods_supported"] == ["S256"]
          and "registration_endpoint" in meta and "revocation_endpoint" in meta, "provider: RFC 8414 metadata", meta)

    # Token exchange: the gateway's assertion (subject) and the agent (actor).
    subject = gw.assertion("alice", issuer)
    actor = gw.assertion("agent-7", issuer, agent=None)
    r = exchange(http, issuer, subject, mcp, actor=actor)
    check(r.status_code == 200, "exchange (client_secret_basic): 200", r.text)
    tok = r.json()
    at = claims(tok["access_token"])
    check(at["sub"] == "alice" and at["act"] == {"sub": "agent-7"} and at["aud"] == mcp and at["iss"] == issuer
          and at["client_id"] == CLIENT and tok["issued_token_type"].endswith(":access_token")
          and jwt.get_unverified_header(tok["access_token"])["typ"] == "at+jwt", "exchange: JWT for the resource", at)
    res = await whoami(mcp, tok["access_token"])
    check(res.structured_content == {"sub": "alice", "act": {"sub": "agent-7"}}
          and json.loads(res.content[0].text) == res.structured_content, "stock client: whoami as alice", res)
    res = await whoami(mcp, tok["access_token"], mode="2026-07-28")
    check(res.structured_content["sub"] == "alice", "stock client (2026-07-28): whoami as alice", res)

    r = exchange(http, issuer, gw.assertion("bob", issuer, agent=None), mcp, post=True)
    check(r.status_code == 200 and "act" not in claims(r.json()["access_token"]), "exchange (client_secret_post), no actor", r.text)
    bob = r.json()["access_token"]
    r = exchange(http, issuer, bob, "http://127.0.0.1:1/other", subject_type="urn:ietf:params:oauth:token-type:access_token")
    check(r.status_code == 200 and claims(r.json()["access_token"])["sub"] == "bob", "exchange: own access token as subject", r.text)
    other = r.json()["access_token"]
    r = exchange(http, issuer, gw.assertion("alice", issuer, ttl=-60), mcp)
    check(r.status_code == 400 and "expired" in r.json().get("error_description", ""), "exchange: expired assertion refused", r.text)
    stranger = ed25519.Ed25519PrivateKey.generate()
    r = exchange(http, issuer, gw.assertion("alice", issuer, key=stranger), mcp)
    check(r.status_code == 400 and r.json()["error"] == "invalid_grant", "exchange: bad signature refused", r.text)
    r = exchange(http, issuer, gw.assertion("alice", issuer, iss="http://evil.example"), mcp)
    check(r.status_code == 400 and "not trusted" in r.json().get("error_description", ""), "exchange: untrusted issuer refused", r.text)
    r = exchange(http, issuer, subject, mcp, secret="wrong")
    check(r.status_code == 401 and r.json()["error"] == "invalid_client", "exchange: wrong client secret refused", r.text)
    r = http.post(mcp, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                  headers={"accept": "application/json, text/event-stream", "authorization": f"Bearer {other}"})
    check(r.status_code == 401 and 'error="invalid_token"' in r.headers.get("www-authenticate", ""),
          "whoami: token for another resource refused (401)", r.headers)

    await id_jag_checks(http, gw)

    # Dynamic registration, then the code flow by posting the interaction forms.
    redirect = "http://127.0.0.1:9/callback"
    r = http.post(f"{issuer}/reg", json={"redirect_uris": [redirect], "grant_types": ["authorization_code", "refresh_token"],
                                         "token_endpoint_auth_method": "none", "client_name": "selftest"})
    check(r.status_code == 201 and r.json().get("client_id"), "dynamic registration: 201 with a client_id", r.text)
    dcr = r.json()["client_id"]
    browser = httpx.Client(timeout=10)
    code, verifier = authorize(browser, issuer, dcr, redirect, mcp, "carol", scope=None)  # as MCP clients do
    ok("authorization (no scope): login page (#login, #submit) and consent page (#submit) completed")
    r = http.post(f"{issuer}/token", data={"grant_type": "authorization_code", "code": code, "code_verifier": verifier,
                                           "redirect_uri": redirect, "client_id": dcr, "resource": mcp})
    check(r.status_code == 200 and "refresh_token" in r.json(), "authorization code + PKCE: access and refresh tokens", r.text)
    t1 = r.json()
    check(claims(t1["access_token"])["sub"] == "carol" and t1["expires_in"] <= 60 and t1["scope"] == "mcp",
          "access token: sub carol, short TTL, default scope mcp", t1)
    res = await whoami(mcp, t1["access_token"])
    check(res.structured_content == {"sub": "carol", "act": None}, "stock client: whoami as carol", res)
    r = http.post(f"{issuer}/token", data={"grant_type": "refresh_token", "refresh_token": t1["refresh_token"], "client_id": dcr})
    check(r.status_code == 200 and r.json()["refresh_token"] != t1["refresh_token"]
          and claims(r.json()["access_token"])["aud"] == mcp, "refresh: rotated, same resource without `resource`", r.text)
    t2 = r.json()
    r = http.post(f"{issuer}/token", data={"grant_type": "refresh_token", "refresh_token": t1["refresh_token"], "client_id": dcr})
    check(r.status_code == 400 and r.json()["error"] == "invalid_grant", "refresh: a spent refresh token is refused", r.text)
    r = http.post(f"{issuer}/token", data={"grant_type": "refresh_token", "refresh_token": t2["refresh_token"], "client_id": dcr})
    check(r.status_code == 400, "refresh: ...and its reuse revoked the whole grant", r.text)
    code, verifier = authorize(httpx.Client(timeout=10), issuer, dcr, redirect, mcp, "dave")
    t3 = http.post(f"{issuer}/token", data={"grant_type": "authorization_code", "code": code, "code_verifier": verifier,
                                            "redirect_uri": redirect, "client_id": dcr}).json()
    r = http.post(f"{issuer}/token/revocation", data={"token": t3["refresh_token"], "client_id": dcr})
    check(r.status_code == 200, "revocation: 200", r.text)
    r = http.post(f"{issuer}/token", data={"grant_type": "refresh_token", "refresh_token": t3["refresh_token"], "client_id": dcr})
    check(r.status_code == 400, "revocation: the revoked refresh token no longer refreshes", r.text)
    r = browser.get(f"{issuer}/auth", params={"client_id": dcr, "response_type": "code", "redirect_uri": redirect,
                                             "resource": mcp, "scope": "mcp"})
    check(r.status_code == 303 and "error=invalid_request" in r.headers["location"], "authorization without PKCE refused",
          r.headers.get("location"))

    # The preconfigured client: native, so its loopback redirect URI matches on any port.
    # (in the browser carol signed in with: erin's sign-in ends carol's session)
    code, verifier = authorize(browser, issuer, CLIENT, "http://127.0.0.1:4567/oauth/callback", mcp, "erin")
    r = http.post(f"{issuer}/token", auth=(CLIENT, SECRET), data={
        "grant_type": "authorization_code", "code": code, "code_verifier": verifier,
        "redirect_uri": "http://127.0.0.1:4567/oauth/callback"})
    check(r.status_code == 200 and claims(r.json()["access_token"])["sub"] == "erin",
          "preconfigured client: code flow on any loopback port", r.text)

    # Assertion mode: the header over HTTP, _meta over stdio.
    aud = "tickets"
    amcp = start([sys.executable, str(WHOAMI), "--port", "0", "--assertion-jwks", gw.jwks,
                  "--assertion-issuer", gw.url, "--audience", aud])
    res = await whoami(amcp, headers={"X-Toolgate-Identity": gw.assertion("alice", aud)})
    check(not res.is_error and res.structured_content == {"sub": "alice", "tenant": "acme", "act": {"sub": "agent-7"}},
          "assertion (header): sub, tenant, act", res)
    for label, value, reason in [("missing", None, "missing"), ("expired", gw.assertion("alice", aud, ttl=-60), "expired"),
                                 ("wrong audience", gw.assertion("alice", "billing"), "wrong audience"),
                                 ("other key", gw.assertion("alice", aud, key=stranger), "invalid"),
                                 ("lifetime over 300 s", gw.assertion("alice", aud, ttl=900), "lifetime")]:
        res = await whoami(amcp, headers={"X-Toolgate-Identity": value} if value else {})
        check(res.is_error and reason in res.content[0].text, f"assertion {label}: tool error", res.content[0].text)
    strict = start([sys.executable, str(WHOAMI), "--port", "0", "--assertion-jwks", gw.jwks,
                    "--assertion-issuer", gw.url, "--require-assertion"])
    r = http.post(strict, json={}, headers={"X-Toolgate-Identity": gw.assertion("alice", "tickets")})
    check(r.status_code == 401 and "wrong audience" in r.json()["error_description"],
          "assertion --require-assertion: 401 with the reason (aud defaults to the server's URL)", r.text)
    res = await whoami(strict, headers={"X-Toolgate-Identity": gw.assertion("alice", strict)})
    check(res.structured_content["sub"] == "alice", "assertion --require-assertion: valid one passes", res)
    params = StdioServerParameters(command=sys.executable, args=[str(WHOAMI), "stdio", "--assertion-jwks", gw.jwks,
                                                                  "--assertion-issuer", gw.url, "--audience", "stdio-srv"])
    async with Client(params) as c:
        res = await c.session.call_tool("whoami", {}, meta={"io.toolgate/identity": gw.assertion("alice", "stdio-srv")})
        check(res.structured_content == {"sub": "alice", "tenant": "acme", "act": {"sub": "agent-7"}},
              "assertion (stdio _meta): sub, tenant, act", res)
        res = await c.session.call_tool("whoami", {})
        check(res.is_error and "missing" in res.content[0].text, "assertion (stdio), none: tool error", res)

    # A Client ID Metadata Document client, the document served over https on loopback.
    tmp = Path(tempfile.mkdtemp())
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(timezone.utc)
    import ipaddress
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=1))
            .not_valid_after(now + timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    (tmp / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    doc: dict = {}
    doc_url = serve(lambda path: (200, doc), tls) + "/client.json"
    doc.update({"client_id": doc_url, "client_name": "toolgate (selftest)", "redirect_uris": [redirect],
                "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
                "token_endpoint_auth_method": "none"})
    cimd = start(["node", str(HERE / "provider.mjs"), "--port", "0", "--cimd"],
                 env={"NODE_EXTRA_CA_CERTS": str(tmp / "cert.pem")})
    check(http.get(f"{cimd}/.well-known/oauth-authorization-server").json().get("client_id_metadata_document_supported")
          is True, "cimd: advertised in metadata")
    code, verifier = authorize(httpx.Client(timeout=10), cimd, doc_url, redirect, mcp, "frank")
    r = http.post(f"{cimd}/token", data={"grant_type": "authorization_code", "code": code, "code_verifier": verifier,
                                         "redirect_uri": redirect, "client_id": doc_url})
    check(r.status_code == 200 and claims(r.json()["access_token"])["client_id"] == doc_url,
          "cimd: code flow with an https client_id URL, no registration", r.text)
    print("selftest passed", flush=True)


if __name__ == "__main__":
    try:
        anyio.run(main)
    finally:
        for p in children:
            p.stdin.close()  # how the peers are told to stop
        for p in children:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
