// The JWT bearer grant (RFC 7523 §2.1) for provider.mjs, as hop 2 of Enterprise-Managed
// Authorization (draft-ietf-oauth-identity-assertion-authz-grant): a client trades an
// Identity Assertion JWT Authorization Grant (ID-JAG) that a trusted IdP issued
// (token_exchange.mjs makes them, as hop 1) for an access token here. Registered with
// oidc-provider's own extension API (provider.registerGrantType).
//
//   POST /token  (client authentication: client_secret_basic, or _post)
//   grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer
//   &assertion=<the ID-JAG>
//   [&resource=<one of the ID-JAG's resources; needed when it names none or several>]
//   [&scope=<a subset of the ID-JAG's scope>]
//
// The ID-JAG is checked (RFC 7521 §5.2 and the draft's processing rules): a JWT whose
// header typ is oauth-id-jag+jwt, `iss` one of the IdPs given by --trust-idjag-issuer
// ISS --trust-idjag-jwks URL (never this provider itself: the draft forbids an IdP to
// honour its own grants), signature by a key of that IdP's JWKS, `aud` this provider's
// issuer, `client_id` the client that authenticated, `exp` not passed, and sub, iat,
// jti present. Any failure is invalid_grant with the reason in error_description.
// Only a confidential client may use it (the draft's security considerations): one
// without authentication (token_endpoint_auth_method none) gets unauthorized_client.
//
// The access token is the one the authorization code flow gives for a resource
// indicator: oidc-provider's own AccessToken, a JWT (typ at+jwt) signed with the /jwks
// key, aud = the resource, sub = the ID-JAG's sub, scope "mcp" (the only scope a
// resource has here: invalid_scope when the ID-JAG or `scope` asks only for others),
// `act` carried from the ID-JAG when it has one. No refresh token (a new ID-JAG gets a
// new access token). The ID-JAG's jti is not remembered: one may be presented again
// until it expires.
import * as jose from 'jose';

import { ALGS, ID_JAG_TYP, carryAct, refuse } from './token_exchange.mjs';

export const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';

// trusted: [{ issuer, jwks }] from --trust-idjag-issuer/--trust-idjag-jwks.
export function jwtBearer({ provider, trusted, resourceServer }) {
  const idps = new Map(trusted.map((t) => [t.issuer, jose.createRemoteJWKSet(new URL(t.jwks))]));

  async function verify(assertion, client) {
    let header;
    let iss;
    try {
      header = jose.decodeProtectedHeader(assertion);
      ({ iss } = jose.decodeJwt(assertion));
    } catch {
      throw refuse('invalid_grant', 'assertion is not a JWT');
    }
    if (header.typ !== ID_JAG_TYP) {
      throw refuse('invalid_grant', `assertion typ must be ${ID_JAG_TYP} (it is ${JSON.stringify(header.typ ?? null)})`);
    }
    if (iss === provider.issuer) {
      throw refuse('invalid_grant', 'assertion was issued by this authorization server itself, which does not honour its own ID-JAGs');
    }
    const keys = idps.get(iss);
    if (!keys) throw refuse('invalid_grant', `assertion issuer ${JSON.stringify(iss)} is not a trusted IdP`);
    let payload;
    try {
      ({ payload } = await jose.jwtVerify(assertion, keys, {
        issuer: iss,
        audience: provider.issuer,
        typ: ID_JAG_TYP,
        algorithms: ALGS,
        requiredClaims: ['sub', 'exp', 'iat', 'jti', 'client_id'],
        clockTolerance: 5,
      }));
    } catch (err) {
      let why = `failed verification (${err.code ?? err.message})`;
      if (err.code === 'ERR_JWT_EXPIRED') why = 'is expired';
      else if (err.code === 'ERR_JWT_CLAIM_VALIDATION_FAILED' && err.claim === 'aud') {
        why = `aud ${JSON.stringify(err.payload?.aud)} is not this authorization server (${provider.issuer})`;
      } else if (err.code === 'ERR_JWT_CLAIM_VALIDATION_FAILED') why = `is invalid: ${err.message}`;
      else if (err.code === 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED' || err.code === 'ERR_JWKS_NO_MATCHING_KEY') {
        why = `signature is not by a key of ${iss}'s JWKS (${err.code})`;
      }
      throw refuse('invalid_grant', `assertion ${why}`);
    }
    if (payload.client_id !== client.clientId) {
      throw refuse('invalid_grant', `assertion client_id ${JSON.stringify(payload.client_id)} is not the`
        + ` authenticated client ${JSON.stringify(client.clientId)}`);
    }
    return payload;
  }

  return async function jwtBearerHandler(ctx) {
    const { params, client } = ctx.oidc;
    if (client.clientAuthMethod === 'none') {
      throw refuse('unauthorized_client', 'the ID-JAG grant is for confidential clients only');
    }
    if (!params.assertion) throw refuse('invalid_request', 'missing assertion');
    const grant = await verify(params.assertion, client);

    // The resource: the ID-JAG's (one), or the parameter (one of the ID-JAG's, if it names any).
    const granted = [grant.resource ?? []].flat().map(String);
    let target = params.resource;
    if (Array.isArray(target)) {
      if (target.length > 1) throw refuse('invalid_target', 'only one resource is supported');
      [target] = target;
    }
    if (target && granted.length && !granted.includes(target)) {
      throw refuse('invalid_target', `resource ${target} is not one the ID-JAG grants (${granted.join(' ')})`);
    }
    if (!target && granted.length > 1) {
      throw refuse('invalid_target', 'the ID-JAG names several resources: pick one with the resource parameter');
    }
    target ||= granted[0];
    if (!target) throw refuse('invalid_target', 'resource is required (in the ID-JAG or as a parameter)');
    const rs = new provider.ResourceServer(target, resourceServer(target));

    // The scope (RFC 6749 §3.3): the parameter's, within the ID-JAG's; or the ID-JAG's;
    // or "mcp"; and of that, what the resource has.
    const split = (s) => String(s).split(' ').filter(Boolean);
    const allowed = grant.scope !== undefined ? new Set(split(grant.scope)) : undefined;
    const asked = params.scope ? split(params.scope) : allowed ? [...allowed] : ['mcp'];
    const beyond = allowed ? asked.filter((s) => !allowed.has(s)) : [];
    if (beyond.length) throw refuse('invalid_scope', `scope ${beyond.join(' ')} is beyond the ID-JAG's (${grant.scope})`);
    const scope = asked.filter((s) => rs.scopes.has(s)).join(' ');
    if (!scope) throw refuse('invalid_scope', `none of ${asked.join(' ') || '(no scope)'} is a scope of ${target} (it has ${rs.scope})`);

    const at = new provider.AccessToken({ accountId: String(grant.sub), client, gty: 'jwt_bearer' });
    carryAct(at, grant.act);
    at.resourceServer = rs;
    at.scope = scope;

    ctx.oidc.entity('AccessToken', at);
    const accessToken = await at.save();
    ctx.body = {
      access_token: accessToken,
      token_type: 'Bearer',
      expires_in: at.expiration,
      scope: at.scope,
    };
  };
}
