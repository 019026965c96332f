// The test identity provider's signing keys: one per algorithm, generated at start, newest first.
// oidc-provider signs with the first key of an algorithm in its key set, so a rotation puts the new
// key in front and keeps the old ones published (tokens already issued must still verify).
// Hand-signing lives here too: it uses the same private keys, so a test can mint the tokens the
// provider will not (a future `nbf`, a foreign `iss`, no `exp`) and have them verify.
import crypto from "node:crypto";

/** The JWS algorithms this provider holds a key for, each key carrying its `alg`. */
export const ALGORITHMS = ["RS256", "PS256", "ES256", "EdDSA"];

function generate(alg) {
  switch (alg) {
    case "RS256":
    case "PS256":
      return crypto.generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey;
    case "ES256":
      return crypto.generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey;
    case "EdDSA":
      return crypto.generateKeyPairSync("ed25519").privateKey;
    default:
      throw new Error(`no key type for ${alg}`);
  }
}

export class KeyRing {
  #keys = []; // { alg, kid, privateKey, jwk }, newest first

  constructor() {
    for (const alg of ALGORITHMS) this.add(alg);
  }

  /** Generates a key for `alg` and puts it in front: the one signed with from now on. */
  add(alg) {
    if (!ALGORITHMS.includes(alg)) throw new Error(`alg must be one of ${ALGORITHMS.join(", ")}`);
    // A random kid, so a restarted provider never reuses a kid a verifier cached for another key.
    const kid = `${alg.toLowerCase()}-${crypto.randomBytes(4).toString("hex")}`;
    const privateKey = generate(alg);
    // `alg` on the JWK keeps oidc-provider from signing PS256 with the RS256 key, and tells a
    // verifier which algorithm the kid is for.
    const jwk = { ...privateKey.export({ format: "jwk" }), kid, alg, use: "sig" };
    this.#keys.unshift({ alg, kid, privateKey, jwk });
    return kid;
  }

  /** The private JWK set, in oidc-provider's `jwks` shape (it publishes the public halves). */
  jwks() {
    return { keys: this.#keys.map((key) => key.jwk) };
  }

  /**
   * The payload of `token` if one of these keys signed it (by its header's `kid`), else null.
   * Nothing else is checked: the caller decides about `exp`, `aud` and the rest.
   */
  verify(token) {
    const parts = String(token).split(".");
    if (parts.length !== 3) return null;
    let header;
    let payload;
    try {
      header = JSON.parse(Buffer.from(parts[0], "base64url").toString("utf8"));
      payload = JSON.parse(Buffer.from(parts[1], "base64url").toString("utf8"));
    } catch {
      return null;
    }
    const key = this.#keys.find((candidate) => candidate.kid === header.kid);
    if (!key || key.alg !== header.alg) return null;
    const data = Buffer.from(`${parts[0]}.${parts[1]}`);
    const sig = Buffer.from(parts[2], "base64url");
    return verifies(key, data, sig) ? payload : null;
  }

  /** The kid signed with for `alg`. */
  current(alg) {
    return this.#keys.find((key) => key.alg === alg)?.kid;
  }

  /**
   * A compact JWS over `payload`, signed with the key `kid` (default: the current key of `alg`).
   * `header` entries override the defaults (`alg`, `typ: at+jwt`, `kid`); a null one is dropped,
   * so a test can send a wrong or missing `kid` with a valid signature.
   */
  sign({ alg = "RS256", kid, header = {}, payload }) {
    const key = kid
      ? this.#keys.find((candidate) => candidate.kid === kid)
      : this.#keys.find((candidate) => candidate.alg === alg);
    if (!key) throw new Error(`no key ${kid ?? `for ${alg}`}`);
    const fullHeader = withoutNulls({ alg: key.alg, typ: "at+jwt", kid: key.kid, ...header });
    const input = `${base64url(JSON.stringify(fullHeader))}.${base64url(JSON.stringify(payload))}`;
    return `${input}.${base64url(signature(key, Buffer.from(input)))}`;
  }
}

function verifies({ alg, privateKey }, data, sig) {
  const publicKey = crypto.createPublicKey(privateKey);
  switch (alg) {
    case "RS256":
      return crypto.verify("sha256", data, publicKey, sig);
    case "PS256":
      return crypto.verify(
        "sha256",
        data,
        { key: publicKey, padding: crypto.constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 },
        sig,
      );
    case "ES256":
      return crypto.verify("sha256", data, { key: publicKey, dsaEncoding: "ieee-p1363" }, sig);
    case "EdDSA":
      return crypto.verify(null, data, publicKey, sig);
    default:
      return false;
  }
}

function signature({ alg, privateKey }, data) {
  switch (alg) {
    case "RS256":
      return crypto.sign("sha256", data, privateKey);
    case "PS256":
      return crypto.sign("sha256", data, {
        key: privateKey,
        padding: crypto.constants.RSA_PKCS1_PSS_PADDING,
        saltLength: 32,
      });
    case "ES256":
      // JWS wants r || s, not the DER node signs with by default.
      return crypto.sign("sha256", data, { key: privateKey, dsaEncoding: "ieee-p1363" });
    case "EdDSA":
      return crypto.sign(null, data, privateKey);
    default:
      throw new Error(`cannot sign ${alg}`);
  }
}

/** `object` without its null-valued entries. */
export function withoutNulls(object) {
  return Object.fromEntries(Object.entries(object).filter(([, value]) => value !== null));
}

function base64url(data) {
  return Buffer.from(data).toString("base64url");
}
