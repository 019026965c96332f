// A real OAuth 2.1 / OpenID Connect authorization server for toolgate's tests: oidc-provider
// (installed in .ci/node) on 127.0.0.1, with machine clients (client credentials), a confidential
// inbox client and a login form for people (authorization code + PKCE), an introspecting resource
// server, dynamic registration, and test-only routes under /_test/ (key rotation, request counts,
// hand-signing). tests/oidc/README.md is the contract; run it with
//
//   node tests/oidc/provider.mjs [--port N] [--config FILE] [--json '{...}']
//
// It prints one line to stdout once it answers, `listening on http://127.0.0.1:PORT` (the
// issuer), and logs everything else to stderr.
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

import { Exchange, TOKEN_EXCHANGE } from "./exchange.mjs";
import { ALGORITHMS, KeyRing, withoutNulls } from "./keys.mjs";
import { escapeHtml, renderLogin } from "./login.mjs";
import { Adapter } from "./store.mjs";

// oidc-provider lives in .ci/node, not beside this file; resolve it from there so the script runs
// from any directory.
const ciNode = createRequire(new URL("../../.ci/node/package.json", import.meta.url));
const { default: Provider, errors } = await import(
  pathToFileURL(ciNode.resolve("oidc-provider")).href
);

// Everything but the ready line goes to stderr, oidc-provider's own notices included.
const log = (...args) => console.error("oidc:", ...args);
console.log = console.info = log;

// ---------------------------------------------------------------------------------------------
// Configuration: these defaults, then --config FILE, then --json, then --port. Scalars and
// `scopes` replace; `clients` merge by client_id and `users` by username (a new id is added).

const machine = (client_id, extra) => ({
  client_id,
  client_secret: `${client_id}-secret`,
  grant_types: ["client_credentials"],
  redirect_uris: [],
  response_types: [],
  scope: "tools:call tools:approve refunds refunds:write",
  ...extra,
});

const DEFAULTS = {
  port: 0,
  // Seconds. Short so expiry is testable; every access token (JWT or opaque) unless a client
  // sets its own `access_token_ttl`.
  access_token_ttl: 300,
  id_token_ttl: 300,
  code_ttl: 60,
  // The JWKS response's Cache-Control max-age, in seconds.
  jwks_max_age: 300,
  // Token exchange: the exchanged tokens' lifetime (default access_token_ttl), whether the
  // answer carries a refresh_token, and audiences refused (`invalid_target`).
  exchange_token_ttl: null,
  exchange_refresh: true,
  exchange_refused_audiences: [],
  // The resource servers' scopes (every resource accepts all of them).
  scopes: ["tools:call", "tools:approve", "refunds", "refunds:write"],
  clients: [
    machine("machine-rs256", { access_token_alg: "RS256" }),
    machine("machine-ps256", { access_token_alg: "PS256" }),
    machine("machine-es256", { access_token_alg: "ES256" }),
    machine("machine-eddsa", { access_token_alg: "EdDSA" }),
    machine("machine-opaque", { access_token_format: "opaque" }),
    {
      client_id: "inbox",
      client_secret: "inbox-secret",
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      redirect_uris: ["http://127.0.0.1:9999/inbox/oidc/callback"],
    },
    // A gateway acting for its callers upstream: token exchange (RFC 8693), HTTP Basic or the
    // secret in the form.
    {
      client_id: "toolgate-exchange",
      client_secret: "toolgate-exchange-secret",
      grant_types: [TOKEN_EXCHANGE],
      redirect_uris: [],
      response_types: [],
    },
    {
      client_id: "toolgate-exchange-post",
      client_secret: "toolgate-exchange-post-secret",
      grant_types: [TOKEN_EXCHANGE],
      redirect_uris: [],
      response_types: [],
      token_endpoint_auth_method: "client_secret_post",
    },
    // A resource server: no grants, it only authenticates to the introspection endpoint.
    {
      client_id: "toolgate",
      client_secret: "toolgate-secret",
      grant_types: [],
      redirect_uris: [],
      response_types: [],
    },
  ],
  users: [
    { username: "dana", name: "Dana Reyes", email: "dana@example.test", groups: ["finance"] },
    { username: "sam", name: "Sam Okafor", email: "sam@example.test", groups: ["support"] },
    { username: "alex", name: "Alex Moreau", email: "alex@example.test", groups: [] },
  ],
};

function mergeBy(key, base, extra = []) {
  const merged = new Map(base.map((item) => [item[key], item]));
  for (const item of extra) merged.set(item[key], { ...merged.get(item[key]), ...item });
  return [...merged.values()];
}

function overlay(base, extra) {
  return {
    ...base,
    ...extra,
    clients: mergeBy("client_id", base.clients, extra.clients),
    users: mergeBy("username", base.users, extra.users),
  };
}

function loadConfig() {
  const { values } = parseArgs({
    options: { port: { type: "string" }, config: { type: "string" }, json: { type: "string" } },
  });
  let config = DEFAULTS;
  if (values.config) config = overlay(config, JSON.parse(fs.readFileSync(values.config, "utf8")));
  if (values.json) config = overlay(config, JSON.parse(values.json));
  if (values.port !== undefined) config = { ...config, port: Number(values.port) };
  return config;
}

const config = loadConfig();
const keys = new KeyRing();
const exchange = new Exchange({
  keys,
  issuer: () => issuer,
  config: () => config,
  errors,
});
const counts = new Map(); // request path -> requests, /_test/ routes excluded
// One cookie key for every Provider built, so a person's session outlives a key rotation.
const cookieKeys = [crypto.randomBytes(32).toString("base64url")];

// ---------------------------------------------------------------------------------------------
// The provider. Built once the port is known (the issuer names it) and again after a rotation or a
// client change, since oidc-provider reads its keys and static clients only when constructed.

const TOKEN_FORMATS = ["jwt", "opaque"];

function clientSetting(client, name) {
  return client?.metadata()[name];
}

function validateClientMetadata(ctx, key, value) {
  if (value === undefined) return;
  const ok = {
    access_token_format: () => TOKEN_FORMATS.includes(value),
    access_token_alg: () => ALGORITHMS.includes(value),
    access_token_ttl: () => Number.isSafeInteger(value) && value > 0,
    access_token_claims: () => typeof value === "object" && value !== null && !Array.isArray(value),
  }[key]();
  if (!ok) throw new errors.InvalidClientMetadata(`invalid ${key}`);
}

function findUser(username) {
  return config.users.find((user) => user.username === username);
}

function accessTokenTtl(ctx, token, client) {
  return clientSetting(client, "access_token_ttl") ?? config.access_token_ttl;
}

function buildProvider(issuer) {
  const provider = new Provider(issuer, {
    adapter: Adapter,
    clients: config.clients,
    jwks: keys.jwks(),
    cookies: {
      keys: cookieKeys,
      // Lax, not oidc-provider's default None: Chromium drops a SameSite=None cookie that is not
      // Secure, and this issuer is plain http.
      long: { signed: true, sameSite: "lax" },
      short: { signed: true, sameSite: "lax" },
    },
    async findAccount(ctx, sub) {
      const user = findUser(sub);
      if (!user) return undefined;
      return {
        accountId: user.username,
        async claims() {
          return {
            sub: user.username,
            name: user.name,
            preferred_username: user.username,
            email: user.email,
            email_verified: true,
            groups: user.groups,
          };
        },
      };
    },
    // `groups` rides with `profile`, so an inbox asking for the usual scopes learns them.
    claims: {
      openid: ["sub"],
      profile: ["name", "preferred_username", "groups"],
      email: ["email", "email_verified"],
    },
    // The ID token carries the person's claims itself (the inbox reads name and groups from it,
    // not from userinfo).
    conformIdTokenClaims: false,
    // Client `scope` metadata is checked against this list, so the resource scopes belong here.
    scopes: ["openid", "offline_access", ...config.scopes],
    extraClientMetadata: {
      properties: [
        "access_token_format",
        "access_token_alg",
        "access_token_ttl",
        "access_token_claims",
      ],
      validator: validateClientMetadata,
    },
    // A person's access token carries their groups, so grants on `groups` work on tokens from the
    // authorization-code flow too; a machine's carries its client's `access_token_claims`.
    async extraTokenClaims(ctx, token) {
      if (token.accountId) return { groups: findUser(token.accountId)?.groups ?? [] };
      return clientSetting(ctx.oidc.client, "access_token_claims");
    },
    features: {
      devInteractions: { enabled: false }, // our own form: /interaction/:uid below
      clientCredentials: { enabled: true },
      introspection: {
        enabled: true,
        // Any confidential client (toolgate's own, a machine) may introspect any token; a public
        // client only its own, since it proves nothing about who is asking.
        async allowedPolicy(ctx, client, token) {
          return client.clientAuthMethod !== "none" || token.clientId === client.clientId;
        },
      },
      revocation: { enabled: true },
      registration: { enabled: true },
      resourceIndicators: {
        enabled: true,
        // A machine token without `resource` would be opaque, audience-less and scope-less;
        // refusing it makes a test that forgets the audience fail loudly.
        async defaultResource(ctx, client, oneOf) {
          if (oneOf) return oneOf;
          if (ctx.oidc.route === "token" && ctx.oidc.params.grant_type === "client_credentials") {
            throw new errors.InvalidTarget("resource is required for client_credentials");
          }
          return undefined;
        },
        // Any http(s) URL is a resource server: toolgate's port is only known once it started.
        async getResourceServerInfo(ctx, resource, client) {
          if (!/^https?:$/.test(new URL(resource).protocol)) {
            throw new errors.InvalidTarget("resource must be an http(s) URL");
          }
          const format = clientSetting(client, "access_token_format") ?? "jwt";
          const alg = clientSetting(client, "access_token_alg") ?? "RS256";
          return {
            scope: config.scopes.join(" "),
            accessTokenFormat: format,
            ...(format === "jwt" ? { jwt: { sign: { alg } } } : {}),
          };
        },
        // A code granted for one resource is exchanged for that resource's token even when the
        // token request leaves `resource` out (as the inbox does).
        async useGrantedResource() {
          return true;
        },
      },
    },
    // An error a browser lands on (a bad redirect_uri, an unknown client): plain, and greppable.
    async renderError(ctx, out) {
      const error = escapeHtml(out.error);
      const description = escapeHtml(out.error_description ?? "");
      ctx.type = "html";
      ctx.body = `<!doctype html><title>${error}</title><h1>${error}</h1>
<p id="error-description">${description}</p>`;
    },
    // OAuth 2.1: the code flow only (no implicit, no hybrid), PKCE for every client, S256 only.
    responseTypes: ["code"],
    pkce: { methods: ["S256"], required: () => true },
    ttl: {
      AccessToken: accessTokenTtl,
      ClientCredentials: accessTokenTtl,
      AuthorizationCode: config.code_ttl,
      IdToken: config.id_token_ttl,
      RefreshToken: 3600,
      Interaction: 600,
      Session: 3600,
      Grant: 3600,
    },
  });

  exchange.register(provider);

  // Verifiers cache the key set for its max-age; oidc-provider sends none.
  provider.use(async (ctx, next) => {
    await next();
    if (ctx.oidc?.route === "jwks") {
      ctx.set("cache-control", `public, max-age=${config.jwks_max_age}`);
    }
  });
  for (const event of [
    "server_error",
    "authorization.error",
    "grant.error",
    "introspection.error",
    "registration_create.error",
    "userinfo.error",
  ]) {
    provider.on(event, (ctx, error) => {
      log(`${event}: ${error.error ?? error.name}: ${error.error_description ?? error.message}`);
    });
  }
  return { provider, handle: provider.callback() };
}

let issuer;
let current; // { provider, handle }

// ---------------------------------------------------------------------------------------------
// HTTP: the test routes and the login form in front of oidc-provider.

function json(res, status, body) {
  res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
  res.end(JSON.stringify(body));
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

/** A test route's refusal of its input: answered 400, not 500. */
class BadRequest extends Error {}

async function readJson(req) {
  const text = await readBody(req);
  try {
    return text.trim() ? JSON.parse(text) : {};
  } catch {
    throw new BadRequest("the body is not JSON");
  }
}

const testRoutes = {
  // A new key for `alg` (query or JSON body; default RS256), signing from now on.
  "POST /_test/rotate": async (req, res, url) => {
    const alg = url.searchParams.get("alg") ?? (await readJson(req)).alg ?? "RS256";
    if (!ALGORITHMS.includes(alg)) {
      throw new BadRequest(`alg must be one of ${ALGORITHMS.join(", ")}`);
    }
    const kid = keys.add(alg);
    current = buildProvider(issuer);
    log(`rotated ${alg}: now signing with ${kid}`);
    json(res, 200, { alg, kid });
  },
  "GET /_test/counts": async (req, res) => {
    const of = (path) => counts.get(path) ?? 0;
    json(res, 200, {
      jwks: of("/jwks"),
      introspection: of("/token/introspection"),
      token: of("/token"),
      discovery: of("/.well-known/openid-configuration"),
      paths: Object.fromEntries(counts),
    });
  },
  "POST /_test/reset-counts": async (req, res) => {
    counts.clear();
    json(res, 200, {});
  },
  // Token exchanges granted and refresh tokens redeemed since start.
  "GET /_test/exchanges": async (req, res) => {
    json(res, 200, { exchanged: exchange.exchanged, refreshed: exchange.refreshed });
  },
  // Adds a static client, or changes one (fields merged over it), e.g. the inbox's redirect URI
  // once toolgate's port is known.
  "POST /_test/clients": async (req, res) => {
    const client = await readJson(req);
    if (typeof client.client_id !== "string") throw new BadRequest("client_id is required");
    const before = config.clients;
    config.clients = mergeBy("client_id", config.clients, [client]);
    try {
      current = buildProvider(issuer);
      // oidc-provider validates static clients when one is first looked up: look it up now, so a
      // bad client is refused here rather than on the test's first token request.
      await current.provider.Client.find(client.client_id);
    } catch (error) {
      config.clients = before;
      current = buildProvider(issuer);
      return json(res, 400, {
        error: "invalid_client_metadata",
        error_description: error.error_description ?? error.message,
      });
    }
    json(res, 200, config.clients.find((candidate) => candidate.client_id === client.client_id));
  },
  // A JWS over `claims` with this provider's key (`alg`, or a specific `kid`), defaults first:
  // iss, iat, exp (now + access_token_ttl), jti. A null claim or header entry is left out.
  "POST /_test/sign": async (req, res) => {
    const { alg, kid, header, claims = {} } = await readJson(req);
    if (alg !== undefined && !ALGORITHMS.includes(alg)) {
      throw new BadRequest(`alg must be one of ${ALGORITHMS.join(", ")}`);
    }
    const now = Math.floor(Date.now() / 1000);
    const payload = withoutNulls({
      iss: issuer,
      iat: now,
      exp: now + config.access_token_ttl,
      jti: crypto.randomUUID(),
      ...claims,
    });
    let token;
    try {
      token = keys.sign({ alg, kid, header, payload });
    } catch (error) {
      throw new BadRequest(error.message); // an unknown kid
    }
    json(res, 200, { token });
  },
};

// The interaction pages oidc-provider redirects a person to: a username form for the login prompt;
// the consent prompt is granted at once (a test provider has nothing to ask).
async function interaction(req, res, url) {
  const match = /^\/interaction\/([\w-]+)(\/login|\/abort)?$/.exec(url.pathname);
  if (!match) return json(res, 404, { error: "not_found" });
  const [, uid, action] = match;
  const { provider } = current;
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) {
    return json(res, 400, { error: "invalid_request", error_description: "interaction mismatch" });
  }
  const page = { uid, client: details.params.client_id, users: config.users };

  if (action === "/abort") {
    return provider.interactionFinished(req, res, {
      error: "access_denied",
      error_description: "the person cancelled the sign-in",
    });
  }
  if (action === "/login" && req.method === "POST") {
    const username = new URLSearchParams(await readBody(req)).get("username")?.trim() ?? "";
    if (!findUser(username)) {
      return renderLogin(res, 401, { ...page, username });
    }
    return provider.interactionFinished(
      req,
      res,
      { login: { accountId: username } },
      { mergeWithLastSubmission: false },
    );
  }
  if (action) return json(res, 405, { error: "method_not_allowed" });

  const { name, details: missing } = details.prompt;
  if (name === "login") {
    return renderLogin(res, 200, page);
  }
  if (name === "consent") {
    const { accountId } = details.session;
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId, clientId: details.params.client_id });
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(" "));
    if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
    for (const [resource, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
      grant.addResourceScope(resource, scopes.join(" "));
    }
    const grantId = await grant.save();
    return provider.interactionFinished(
      req,
      res,
      { consent: { grantId } },
      { mergeWithLastSubmission: true },
    );
  }
  json(res, 400, { error: "invalid_request", error_description: `unsupported prompt ${name}` });
}

async function route(req, res) {
  const url = new URL(req.url, issuer);
  if (url.pathname.startsWith("/_test/")) {
    const handler = testRoutes[`${req.method} ${url.pathname}`];
    if (!handler) return json(res, 404, { error: "not_found" });
    return handler(req, res, url);
  }
  counts.set(url.pathname, (counts.get(url.pathname) ?? 0) + 1);
  if (url.pathname.startsWith("/interaction/")) return interaction(req, res, url);
  // The token endpoint's form is read here, for the refresh of exchanged tokens; oidc-provider
  // then reads it from req.body (its fallback for a body already parsed).
  if (req.method === "POST" && url.pathname === "/token") {
    const body = await readBody(req);
    if (exchange.refresh(req, res, body, json)) return undefined;
    req.body = body;
  }
  // RFC 8414 metadata is the same document as OIDC discovery; oidc-provider serves only the latter.
  if (url.pathname === "/.well-known/oauth-authorization-server") {
    req.url = "/.well-known/openid-configuration";
  }
  return current.handle(req, res);
}

const server = http.createServer((req, res) => {
  const path = req.url.split("?")[0];
  res.on("finish", () => log(`${req.method} ${path} ${res.statusCode}`));
  route(req, res).catch((error) => {
    // A BadRequest, or an oidc-provider error (e.g. a login form posted without its interaction
    // cookie), is the client's fault and says so; anything else is a bug here.
    const status = error instanceof BadRequest ? 400 : (error.statusCode ?? 500);
    const why = status < 500 ? (error.error_description ?? error.message) : (error.stack ?? error);
    log(`${req.method} ${path}: ${why}`);
    if (res.headersSent) return res.end();
    json(res, status, {
      error: error.error ?? (status < 500 ? "invalid_request" : "server_error"),
      error_description: error.error_description ?? error.message,
    });
  });
});

server.listen(config.port, "127.0.0.1", () => {
  issuer = `http://127.0.0.1:${server.address().port}`;
  current = buildProvider(issuer);
  process.stdout.write(`listening on ${issuer}\n`);
});

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    server.close();
    process.exit(0);
  });
}
