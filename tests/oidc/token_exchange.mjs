// RFC 8693 token exchange for provider.mjs, registered with oidc-provider's own
// extension API (provider.registerGrantType): toolgate's `exchange` mode trades the
// caller's token, or its own identity assertion (issue 61), for an access token for
// one upstream server.
//
// Accepted subject and actor tokens are JWTs, checked for signature, `exp`, `iss`
// (and `nbf`), from one of:
//   - this provider: its own JWT access tokens (verified against its own key);
//   - a trusted issuer given by --trust-issuer ISS --trust-jwks URL (toolgate's
//     assertions: EdDSA, keys at <gateway>/.well-known/jwks.json), with `aud`
//     checked too when --trust-audience AUD is given.
// The issued token is a JWT access token (typ at+jwt, like the authorization code
// flow's) for `resource` (or else `audience`), `sub` = the subject token's `sub`,
// `act` = {sub: actor's sub} when an actor token was given (RFC 8693 §4.1; a prior
// actor the subject token carried is nested inside it), or else the subject token's
// own `act`, so delegation recorded upstream survives the exchange. No refresh token.
//
// With requested_token_type=urn:ietf:params:oauth:token-type:id-jag (hop 1 of
// Enterprise-Managed Authorization, draft-ietf-oauth-identity-assertion-authz-grant)
// the same checked subject (and actor) become an Identity Assertion JWT Authorization
// Grant instead: a JWT signed with this provider's own key (the /jwks one), header
// typ oauth-id-jag+jwt, claims iss (this provider), sub, aud = `audience` (the
// resource authorization server's issuer: required), client_id (the client that
// server knows the caller as: provider.mjs's --idjag-client-id), resource and scope
// (the parameters, when given), act (as above), jti, iat, exp (5 minutes). The answer
// is the draft's: issued_token_type id-jag, token_type N_A, expires_in 300.
// jwt_bearer.mjs is the other hop: where such a grant is traded for an access token.
import * as crypto from 'node:crypto';

import * as jose from 'jose';
import { errors } from 'oidc-provider';

export const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN = 'urn:ietf:params:oauth:token-type:access_token';
const JWT = 'urn:ietf:params:oauth:token-type:jwt';
export const ID_JAG = 'urn:ietf:params:oauth:token-type:id-jag';
export const ID_JAG_TYP = 'oauth-id-jag+jwt';
export const ID_JAG_TTL = 300;
export const ALGS = ['EdDSA', 'Ed25519', 'RS256', 'PS256', 'ES256'];

// The `act` of each token this grant issues, for provider.mjs's extraTokenClaims
// (oidc-provider's documented hook for extra JWT claims; it overwrites `extra`).
const acts = new WeakMap();
export const exchangeClaims = (ctx, token) => (acts.has(token) ? { act: acts.get(token) } : undefined);
// Records the `act` an access token made elsewhere (jwt_bearer.mjs) is to carry.
export const carryAct = (token, act) => { if (act) acts.set(token, act); };

// Errors carry their reason in error_description (oidc-provider hides InvalidGrant's).
export const refuse = (error, description) => new errors.CustomOIDCProviderError(error, description);

// idJag: { sign(claims) -> compact JWT with this provider's key, clientId } (hop 1).
export function tokenExchange({ provider, ownJwks, trusted, resourceServer, idJag }) {
  const remote = new Map(trusted.map((t) => [t.issuer, { ...t, keys: jose.createRemoteJWKSet(new URL(t.jwks)) }]));

  async function verify(label, token, type) {
    if (![ACCESS_TOKEN, JWT].includes(type)) {
      throw refuse('invalid_request', `${label}_type must be ${ACCESS_TOKEN} or ${JWT}`);
    }
    let iss;
    try {
      ({ iss } = jose.decodeJwt(token));
    } catch {
      throw refuse('invalid_grant', `${label} is not a JWT`);
    }
    const own = iss === provider.issuer;
    const peer = remote.get(iss);
    if (!own && !peer) throw refuse('invalid_grant', `${label} issuer ${JSON.stringify(iss)} is not trusted`);
    try {
      const { payload } = await jose.jwtVerify(token, own ? ownJwks : peer.keys, {
        issuer: iss,
        algorithms: ALGS,
        requiredClaims: ['sub', 'exp'],
        ...(own ? { typ: 'at+jwt' } : {}),
        ...(peer?.audience ? { audience: peer.audience } : {}),
        clockTolerance: 5,
      });
      return payload;
    } catch (err) {
      const why = err.code === 'ERR_JWT_EXPIRED' ? 'is expired' : `failed verification (${err.code ?? err.message})`;
      throw refuse('invalid_grant', `${label} ${why}`);
    }
  }

  return async function tokenExchangeHandler(ctx) {
    const { params, client } = ctx.oidc;
    const single = (name) => {
      const v = params[name];
      if (Array.isArray(v)) {
        if (v.length > 1) throw refuse('invalid_target', `only one ${name} is supported`);
        return v[0];
      }
      return v;
    };
    if (!params.subject_token) throw refuse('invalid_request', 'missing subject_token');
    const wantsIdJag = params.requested_token_type === ID_JAG;
    if (params.requested_token_type && params.requested_token_type !== ACCESS_TOKEN && !wantsIdJag) {
      throw refuse('invalid_request', `requested_token_type must be ${ACCESS_TOKEN} or ${ID_JAG}`);
    }
    const target = wantsIdJag ? single('audience') : single('resource') || single('audience');
    if (!target) {
      throw refuse(wantsIdJag ? 'invalid_request' : 'invalid_target', wantsIdJag
        ? 'audience (the issuer of the authorization server the ID-JAG is for) is required'
        : 'resource or audience is required');
    }

    const subject = await verify('subject_token', params.subject_token, params.subject_token_type);
    let act = subject.act;
    if (params.actor_token) {
      const actor = await verify('actor_token', params.actor_token, params.actor_token_type);
      act = { sub: actor.sub, ...(subject.act && subject.act.sub !== actor.sub ? { act: subject.act } : {}) };
    } else if (params.actor_token_type) {
      throw refuse('invalid_request', 'actor_token_type without actor_token');
    }

    if (wantsIdJag) {
      const resource = single('resource');
      const now = Math.floor(Date.now() / 1000);
      const claims = {
        iss: provider.issuer,
        sub: String(subject.sub),
        aud: target,
        client_id: idJag.clientId,
        ...(resource ? { resource } : {}),
        ...(params.scope ? { scope: params.scope } : {}),
        ...(act ? { act } : {}),
        jti: crypto.randomUUID(),
        iat: now,
        exp: now + ID_JAG_TTL,
      };
      ctx.body = {
        access_token: await idJag.sign(claims),
        issued_token_type: ID_JAG,
        token_type: 'N_A',
        expires_in: ID_JAG_TTL,
        ...(params.scope ? { scope: params.scope } : {}),
      };
      return;
    }

    const at = new provider.AccessToken({
      accountId: String(subject.sub), client, gty: 'token_exchange',
    });
    if (act) acts.set(at, act);
    // An `audience` that is not a URL (a logical name) is used as-is for `aud`.
    const info = /^https?:\/\//.test(target) ? resourceServer(target)
      : { ...resourceServer('http://placeholder'), audience: target };
    at.resourceServer = new provider.ResourceServer(target, info);
    const wanted = new Set(String(params.scope || 'mcp').split(' '));
    at.scope = [...at.resourceServer.scopes].filter((s) => wanted.has(s)).join(' ') || undefined;

    ctx.oidc.entity('AccessToken', at);
    const accessToken = await at.save();
    ctx.body = {
      access_token: accessToken,
      issued_token_type: ACCESS_TOKEN,
      token_type: 'Bearer',
      expires_in: at.expiration,
      ...(at.scope ? { scope: at.scope } : {}),
    };
  };
}
