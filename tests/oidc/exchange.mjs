// OAuth 2.0 Token Exchange (RFC 8693) for the test identity provider: a client allowed the
// grant trades a subject's access token (one this provider signed, not expired) for a token
// meant for another `audience`, naming the subject (`sub`) and the client acting for it (`act`).
// With `exchange_refresh` (default true) the answer carries a `refresh_token` that
// `grant_type=refresh_token` at /token redeems for a fresh token of the same subject and audience
// (handled here, in front of oidc-provider, which knows nothing of these refresh tokens).
import crypto from "node:crypto";

export const TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange";
export const ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token";

const REFRESH_PREFIX = "xrt-";
const REFRESH_TTL = 3600;

/**
 * The exchange: registers the grant on `provider`, and answers the refresh of its tokens.
 * `context` gives `keys` (the KeyRing), `issuer()`, `config()` and oidc-provider's `errors`.
 */
export class Exchange {
  #refreshTokens = new Map(); // token -> { clientId, claims, expires }
  #context;
  exchanged = 0;
  refreshed = 0;

  constructor(context) {
    this.#context = context;
  }

  /** Registers the token-exchange grant on a freshly built provider. */
  register(provider) {
    const params = ["subject_token", "subject_token_type", "requested_token_type", "audience", "scope"];
    provider.registerGrantType(TOKEN_EXCHANGE, (ctx) => this.#grant(ctx), params);
  }

  async #grant(ctx) {
    const { keys, config, errors } = this.#context;
    const { params, client } = ctx.oidc;
    if (params.subject_token_type !== ACCESS_TOKEN_TYPE) {
      throw new errors.InvalidRequest(`subject_token_type must be ${ACCESS_TOKEN_TYPE}`);
    }
    const subject = keys.verify(params.subject_token);
    if (!subject) throw new errors.InvalidGrant("subject_token is not a token of this issuer");
    const now = Math.floor(Date.now() / 1000);
    if (typeof subject.exp !== "number" || subject.exp <= now) {
      throw new errors.InvalidGrant("subject_token has expired");
    }
    if (!params.audience) throw new errors.InvalidTarget("audience is required");
    if ((config().exchange_refused_audiences ?? []).includes(params.audience)) {
      throw new errors.InvalidTarget(`no token for the audience ${params.audience}`);
    }
    const claims = {
      sub: subject.sub,
      aud: params.audience,
      client_id: subject.client_id,
      act: { sub: client.clientId },
      ...(params.scope ? { scope: params.scope } : {}),
    };
    const body = { ...this.#mint(claims), issued_token_type: ACCESS_TOKEN_TYPE };
    if (config().exchange_refresh !== false) {
      const token = `${REFRESH_PREFIX}${crypto.randomBytes(24).toString("base64url")}`;
      this.#refreshTokens.set(token, {
        clientId: client.clientId,
        claims,
        expires: now + REFRESH_TTL,
      });
      body.refresh_token = token;
    }
    this.exchanged += 1;
    ctx.body = body;
  }

  /** `{access_token, token_type, expires_in}` for `claims`, signed now. */
  #mint(claims) {
    const { keys, config, issuer } = this.#context;
    const ttl = config().exchange_token_ttl ?? config().access_token_ttl;
    const now = Math.floor(Date.now() / 1000);
    const payload = { iss: issuer(), iat: now, exp: now + ttl, jti: crypto.randomUUID(), ...claims };
    return { access_token: keys.sign({ alg: "RS256", payload }), token_type: "Bearer", expires_in: ttl };
  }

  /**
   * Answers a /token request whose form `body` redeems one of these refresh tokens, and says
   * whether it did (false: not ours, oidc-provider answers it).
   */
  refresh(req, res, body, json) {
    const form = new URLSearchParams(body);
    const token = form.get("refresh_token") ?? "";
    if (form.get("grant_type") !== "refresh_token" || !token.startsWith(REFRESH_PREFIX)) {
      return false;
    }
    const client = this.#authenticated(req, form);
    if (!client) {
      json(res, 401, { error: "invalid_client", error_description: "client authentication failed" });
      return true;
    }
    const held = this.#refreshTokens.get(token);
    const now = Math.floor(Date.now() / 1000);
    if (!held || held.clientId !== client || held.expires <= now) {
      json(res, 400, { error: "invalid_grant", error_description: "refresh_token is not valid" });
      return true;
    }
    this.refreshed += 1;
    json(res, 200, this.#mint(held.claims));
    return true;
  }

  /** The client id a request authenticates as (Basic, or client_secret_post), if it does. */
  #authenticated(req, form) {
    let id = form.get("client_id");
    let secret = form.get("client_secret");
    const basic = /^Basic (.+)$/i.exec(req.headers.authorization ?? "");
    if (basic) {
      const [user, pass] = Buffer.from(basic[1], "base64").toString("utf8").split(":");
      id = decodeURIComponent(user.replace(/\+/g, " "));
      secret = decodeURIComponent((pass ?? "").replace(/\+/g, " "));
    }
    const client = this.#context.config().clients.find((c) => c.client_id === id);
    return client && client.client_secret === secret ? id : null;
  }
}
