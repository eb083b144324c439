// The authorization server peer of toolgate's upstream-identity tests (issue 61):
// oidc-provider 9.x, the certified OpenID Provider, configured for what toolgate's
// `oauth` and `exchange` modes talk to. A test peer, never a deployment: any login
// name is an account, and every key is made fresh at start.
//
//   node tests/oidc/provider.mjs [--port 0] [--client toolgate:toolgate-secret]...
//        [--redirect-uri http://127.0.0.1/oauth/callback]... [--access-ttl 300]
//        [--trust-issuer ISS --trust-jwks URL [--trust-audience AUD]]...
//        [--idjag-client-id toolgate] [--trust-idjag-issuer ISS --trust-idjag-jwks URL]...
//        [--auto-consent] [--remember-login] [--cimd]
//
// Prints `listening on http://127.0.0.1:PORT` (that URL is the issuer) on stdout once it serves
// (everything else goes to stderr); exits when stdin closes or on SIGTERM.
//
// It serves: discovery (/.well-known/openid-configuration and RFC 8414's
// /.well-known/oauth-authorization-server), authorization code with PKCE (S256 only,
// required of every client), refresh tokens (issued to every client allowed the
// refresh_token grant, rotated on every use: a spent one revokes the whole grant),
// resource indicators (RFC 8707: any http(s) resource gets a JWT access token signed
// with the /jwks key, aud = the resource, scope "mcp"), open dynamic registration
// (RFC 7591, /reg), revocation (RFC 7009), introspection (opaque tokens and refresh
// tokens only: oidc-provider never introspects its JWT access tokens), token
// exchange (RFC 8693, below), and both hops of Enterprise-Managed Authorization
// (below).
//
// Token exchange (token_exchange.mjs): subject_token (+ optional actor_token), each of
// type urn:ietf:params:oauth:token-type:jwt or ...:access_token, is a JWT from a
// trusted issuer (--trust-issuer ISS --trust-jwks URL, repeatable; --trust-audience AUD
// after it also checks `aud`) or one of this provider's own JWT access tokens; the
// answer is a JWT access token for `resource` (or `audience`) with that sub (and `act`).
//
// Enterprise-Managed Authorization (ID-JAG, draft-ietf-oauth-identity-assertion-authz-
// grant): one instance is the enterprise IdP, another the MCP server's authorization
// server (AS), each an instance of this same script.
//   hop 1, at the IdP: token exchange with requested_token_type
//     urn:ietf:params:oauth:token-type:id-jag and audience = the AS's issuer (required),
//     resource and scope optional, the subject (and actor) token as above. The answer
//     is {access_token: <ID-JAG>, issued_token_type: ...:id-jag, token_type: "N_A",
//     expires_in: 300}: a JWT signed with this provider's /jwks key, header typ
//     oauth-id-jag+jwt, claims iss, sub (the subject token's), aud (= audience),
//     client_id (--idjag-client-id, default "toolgate": the id the AS knows the
//     client by), resource, scope (when given), act (as token exchange derives it),
//     jti, iat, exp (5 minutes).
//   hop 2, at the AS (jwt_bearer.mjs): grant_type
//     urn:ietf:params:oauth:grant-type:jwt-bearer with assertion = the ID-JAG, optional
//     resource and scope, the client authenticated (client_secret_basic). The ID-JAG
//     must be typ oauth-id-jag+jwt, from an IdP given by --trust-idjag-issuer ISS
//     --trust-idjag-jwks URL (repeatable pairs; never this provider itself), signed by
//     its JWKS, aud = this issuer, client_id = the authenticated client, not expired;
//     otherwise invalid_grant with the reason. The answer is the usual token response
//     with a JWT access token as for a resource indicator: aud = the ID-JAG's resource
//     (or the resource parameter), sub = its sub, scope "mcp", its act carried.
// Discovery lists both (grant_types_supported; identity_chaining_requested_token_types_
// supported, the identity chaining draft's metadata, names id-jag).
//
// The interaction pages, for a browser driven by WebDriver:
//   login page:   <form id="login-form">, text input #login (name "login"; the text
//                 typed becomes the token's `sub`), button #submit.
//   consent page: <form id="consent-form">, button #submit (allow), button #deny
//                 (refuse: the client gets error=access_denied).
// By default every authorization asks for both, so each person signs in as
// themselves even in a reused browser: --remember-login keeps oidc-provider's usual
// session (no login page while signed in), --auto-consent grants without the page.
// Signing in as someone else in a browser that holds another person's session
// passes, between the two pages, through oidc-provider's own logout page: a form
// to /session/end/confirm that JavaScript submits by itself (no action needed).
//
// Clients: each --client ID:SECRET (default toolgate:toolgate-secret) is a
// preconfigured confidential client (client_secret_basic or client_secret_post),
// allowed the authorization code, refresh token, token exchange and JWT bearer grants, of
// application_type "native" so that its loopback redirect URIs match on any port
// (RFC 8252 §7.3): --redirect-uri http://127.0.0.1/oauth/callback (the default; give
// the path toolgate's callback uses) allows http://127.0.0.1:ANY/oauth/callback.
// Dynamically registered clients may use any http://127.0.0.1 redirect URI they
// register (exactly, or on any port when they register application_type "native").
//
// Client ID Metadata Documents: oidc-provider 9.13 implements them (experimental,
// draft-02), enabled here by --cimd. Its rules are the draft's, kept as they are:
// the client_id must be an https URL, and the client may not use a client secret.
// Its fetch refuses loopback addresses (an SSRF guard); --cimd lifts that guard
// through the documented `fetch` option, since every peer here is on 127.0.0.1.
// A self-signed document server needs its CA given to Node: NODE_EXTRA_CA_CERTS.
// Without --cimd, discovery does not advertise it and a client falls back to
// dynamic registration.
import * as http from 'node:http';
import * as crypto from 'node:crypto';

import * as jose from 'jose';
import Provider, { errors, interactionPolicy } from 'oidc-provider';

import { exchangeClaims, tokenExchange, ID_JAG, ID_JAG_TYP, TOKEN_EXCHANGE } from './token_exchange.mjs';
import { jwtBearer, JWT_BEARER } from './jwt_bearer.mjs';

// oidc-provider writes notices with console.info; stdout carries the ready line only.
console.info = console.log = (...args) => console.error(...args);

function parseArgs(argv) {
  const opts = {
    port: 0, clients: [], redirectUris: [], accessTtl: 300, trusted: [],
    idjagClientId: 'toolgate', trustedIdps: [],
    autoConsent: false, rememberLogin: false, cimd: false,
  };
  for (let i = 0; i < argv.length; i += 1) {
    const flag = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`);
      i += 1;
      return argv[i];
    };
    switch (flag) {
      case '--port': opts.port = Number(value()); break;
      case '--client': {
        const [id, ...secret] = value().split(':');
        if (!id || !secret.length) throw new Error('--client takes ID:SECRET');
        opts.clients.push({ id, secret: secret.join(':') });
        break;
      }
      case '--redirect-uri': opts.redirectUris.push(value()); break;
      case '--access-ttl': opts.accessTtl = Number(value()); break;
      // A trusted external issuer starts a new entry; --trust-jwks/--trust-audience fill the last.
      case '--trust-issuer': opts.trusted.push({ issuer: value() }); break;
      case '--trust-jwks':
      case '--trust-audience': {
        const last = opts.trusted.at(-1);
        if (!last) throw new Error(`${flag} must follow --trust-issuer`);
        last[flag === '--trust-jwks' ? 'jwks' : 'audience'] = value();
        break;
      }
      case '--idjag-client-id': opts.idjagClientId = value(); break;
      // A trusted IdP (whose ID-JAGs the JWT bearer grant takes) and its JWKS, in pairs.
      case '--trust-idjag-issuer': opts.trustedIdps.push({ issuer: value() }); break;
      case '--trust-idjag-jwks': {
        const last = opts.trustedIdps.at(-1);
        if (!last || last.jwks) throw new Error(`${flag} must follow --trust-idjag-issuer`);
        last.jwks = value();
        break;
      }
      case '--auto-consent': opts.autoConsent = true; break;
      case '--remember-login': opts.rememberLogin = true; break;
      case '--cimd': opts.cimd = true; break;
      default: throw new Error(`unknown flag ${flag}`);
    }
  }
  if (!opts.clients.length) opts.clients.push({ id: 'toolgate', secret: 'toolgate-secret' });
  if (!opts.redirectUris.length) opts.redirectUris.push('http://127.0.0.1/oauth/callback');
  if (!(opts.accessTtl > 0)) throw new Error('--access-ttl takes a positive number of seconds');
  for (const t of opts.trusted) {
    if (!t.jwks) throw new Error(`--trust-issuer ${t.issuer} needs --trust-jwks URL`);
  }
  for (const t of opts.trustedIdps) {
    if (!t.jwks) throw new Error(`--trust-idjag-issuer ${t.issuer} needs --trust-idjag-jwks URL`);
  }
  if (!opts.idjagClientId) throw new Error('--idjag-client-id takes a non-empty client id');
  return opts;
}

const opts = parseArgs(process.argv.slice(2));

// Bind first: the issuer names the port the OS picked.
const server = http.createServer();
await new Promise((resolve, reject) => {
  server.once('error', reject);
  server.listen(opts.port, '127.0.0.1', resolve);
});
const issuer = `http://127.0.0.1:${server.address().port}`;

// A fresh RS256 signing key (ID tokens and JWT access tokens); its public half is
// also how token exchange recognises this provider's own access tokens.
const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
const signingJwk = { ...await jose.exportJWK(privateKey), kid: crypto.randomUUID(), alg: 'RS256', use: 'sig' };
const { d, p, q, dp, dq, qi, ...publicJwk } = signingJwk;

const fresh = (ctx) => (ctx.oidc.result?.login ? interactionPolicy.Check.NO_NEED_TO_PROMPT
  : interactionPolicy.Check.REQUEST_PROMPT);
const policy = interactionPolicy.base();
if (!opts.rememberLogin) {
  policy.get('login').checks.add(new interactionPolicy.Check('fresh_login', 'every authorization signs in', fresh));
}
// Always show the consent page (the automatic checks only ask when a scope is new).
policy.get('consent').checks.add(new interactionPolicy.Check('always_consent', 'every authorization asks',
  (ctx) => (ctx.oidc.result?.consent ? interactionPolicy.Check.NO_NEED_TO_PROMPT
    : interactionPolicy.Check.REQUEST_PROMPT)));

const provider = new Provider(issuer, {
  clients: opts.clients.map(({ id, secret }) => ({
    client_id: id,
    client_secret: secret,
    application_type: 'native',
    redirect_uris: opts.redirectUris,
    grant_types: ['authorization_code', 'refresh_token', TOKEN_EXCHANGE, JWT_BEARER],
    token_endpoint_auth_method: 'client_secret_basic',
  })),
  jwks: { keys: [signingJwk] },
  cookies: { keys: [crypto.randomBytes(32).toString('base64url')] },
  // Any login name is an account; its id is the `sub`.
  findAccount: (ctx, sub) => ({ accountId: sub, claims: () => ({ sub }) }),
  interactions: { policy, url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  pkce: { required: () => true },
  responseTypes: ['code'], // OAuth 2.1: no implicit, no hybrid
  scopes: ['openid', 'offline_access', 'mcp'],
  // A request without `scope` (what an MCP client sends when the resource's metadata
  // lists no scopes_supported) gets "mcp": oidc-provider refuses to grant nothing.
  extraParams: { scope: (ctx, value) => { if (!value) ctx.oidc.params.scope = 'mcp'; } },
  // Explicit lifetimes (oidc-provider asks for them): short, as suits a test run.
  ttl: {
    AccessToken: opts.accessTtl, AuthorizationCode: 60, Interaction: 600, Session: 3600,
    Grant: 86400, RefreshToken: 86400, IdToken: 3600,
  },
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  rotateRefreshToken: true,
  extraTokenClaims: exchangeClaims, // `act` on exchanged tokens (and on ID-JAG grants')
  // RFC 8414 metadata for hop 1 (the identity chaining draft's property); the
  // defaults' own entry is kept.
  discovery: {
    claim_types_supported: ['normal'],
    identity_chaining_requested_token_types_supported: [
      'urn:ietf:params:oauth:token-type:access_token', ID_JAG],
  },
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // A refresh may omit `resource`: the token is for the one that was granted.
      useGrantedResource: async () => true,
      getResourceServerInfo: async (ctx, resource) => resourceServer(resource),
    },
    ...(opts.cimd ? { clientIdMetadataDocument: { enabled: true, ack: 'draft-02' } } : {}),
  },
  // Only with --cimd is there anything to fetch: drop the loopback guard (see the top).
  ...(opts.cimd ? { fetch: (url, options) => { delete options.dispatcher; return fetch(url, options); } } : {}),
});

// Every resource indicator names a resource server here: JWT access tokens for it.
function resourceServer(resource) {
  if (!/^https?:\/\//.test(resource)) throw new errors.InvalidTarget('resource must be an http(s) URL');
  return {
    scope: 'mcp', audience: resource, accessTokenFormat: 'jwt', accessTokenTTL: opts.accessTtl,
    jwt: { sign: { alg: 'RS256' } },
  };
}

// Hop 1's ID-JAG is signed with the same key as everything else (the one at /jwks).
const signIdJag = (claims) => new jose.SignJWT(claims)
  .setProtectedHeader({ alg: 'RS256', kid: signingJwk.kid, typ: ID_JAG_TYP })
  .sign(privateKey);

provider.registerGrantType(TOKEN_EXCHANGE, tokenExchange({
  provider, ownJwks: jose.createLocalJWKSet({ keys: [publicJwk] }), trusted: opts.trusted, resourceServer,
  idJag: { sign: signIdJag, clientId: opts.idjagClientId },
}), ['audience', 'resource', 'scope', 'requested_token_type', 'subject_token', 'subject_token_type',
  'actor_token', 'actor_token_type'], ['audience', 'resource']);

provider.registerGrantType(JWT_BEARER, jwtBearer({ provider, trusted: opts.trustedIdps, resourceServer }),
  ['assertion', 'resource', 'scope']);

provider.use(interactions);

// The interaction pages (ids documented at the top).
async function interactions(ctx, next) {
  const match = /^\/interaction\/([\w-]+)$/.exec(ctx.path);
  if (!match) return next();
  ctx.set('cache-control', 'no-store');
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  const { prompt, params, uid } = details;
  if (ctx.method === 'GET') {
    if (prompt.name === 'consent' && opts.autoConsent) return consent(ctx, details);
    ctx.type = 'html';
    ctx.body = page(prompt.name, uid, params);
    return undefined;
  }
  if (ctx.method !== 'POST') return next();
  const form = new URLSearchParams(await readBody(ctx.req));
  if (prompt.name === 'login') {
    const login = (form.get('login') || '').trim();
    if (!login) {
      ctx.type = 'html';
      ctx.body = page('login', uid, params, 'Type a name to sign in as.');
      return undefined;
    }
    return provider.interactionFinished(ctx.req, ctx.res, { login: { accountId: login, remember: false } },
      { mergeWithLastSubmission: false });
  }
  if (form.has('deny')) {
    return provider.interactionFinished(ctx.req, ctx.res,
      { error: 'access_denied', error_description: 'the person refused consent' }, { mergeWithLastSubmission: false });
  }
  return consent(ctx, details);
}

// Grants what the request asked for (the in-repo example's consent handler).
async function consent(ctx, { prompt: { details }, params, session, grantId }) {
  const grant = grantId ? await provider.Grant.find(grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  if (details.missingOIDCScope) grant.addOIDCScope(details.missingOIDCScope.join(' '));
  if (details.missingOIDCClaims) grant.addOIDCClaims(details.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(details.missingResourceScopes || {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const saved = await grant.save();
  return provider.interactionFinished(ctx.req, ctx.res, { consent: grantId ? {} : { grantId: saved } },
    { mergeWithLastSubmission: true });
}

function page(name, uid, params, note = '') {
  const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  const body = name === 'login'
    ? `<h1>Sign in</h1><form id="login-form" method="post" action="/interaction/${uid}">
<p>${esc(note)}</p><label for="login">Name</label> <input id="login" name="login" type="text" autofocus>
<button id="submit" type="submit">Sign in</button></form>`
    : `<h1>Allow access</h1><p>${esc(params.client_id)} asks to act for you at ${esc(params.resource)}
(scope: ${esc(params.scope)}).</p><form id="consent-form" method="post" action="/interaction/${uid}">
<button id="submit" type="submit">Allow</button> <button id="deny" name="deny" value="1" type="submit">Deny</button></form>`;
  return `<!DOCTYPE html><html><head><meta charset="utf-8"><title>${esc(name)}</title></head><body>${body}</body></html>`;
}

async function readBody(req) {
  let text = '';
  for await (const chunk of req) {
    text += chunk;
    if (text.length > 65536) throw new errors.InvalidRequest('form too large');
  }
  return text;
}

// What went wrong, for whoever reads the test's log (never a token).
for (const event of ['server_error', 'grant.error', 'authorization.error', 'registration_create.error',
  'revocation.error', 'introspection.error']) {
  provider.on(event, (ctx, err) => console.error(`oidc-provider ${event}: ${err?.message ?? ctx?.message}`
    + `${err?.error_description ? ` (${err.error_description})` : ''}`));
}

server.on('request', provider.callback());
process.stdout.write(`listening on ${issuer}\n`); // the issuer, too

const stop = () => { server.close(); process.exit(0); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.on('error', stop);
process.stdin.resume();
