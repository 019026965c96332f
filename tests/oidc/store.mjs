// oidc-provider's storage (its "adapter"): sessions, interactions, codes, grants, opaque tokens and
// registered clients, in memory. One store for the whole process, so every Provider instance the
// harness builds (a key rotation or a client change builds a new one) sees the same state.
// oidc-provider's own in-memory adapter is an LRU of 1000 entries: a test minting many opaque
// tokens would silently evict sessions or tokens, so this one keeps everything until it expires.

const store = new Map(); // `${model}:${id}` -> { payload, expiresAt }
const byGrant = new Map(); // grantId -> Set of store keys, to revoke a grant's tokens
const bySessionUid = new Map(); // Session uid -> id

/** One oidc-provider model's view of the store (oidc-provider constructs one per model name). */
export class Adapter {
  constructor(model) {
    this.model = model;
  }

  key(id) {
    return `${this.model}:${id}`;
  }

  async upsert(id, payload, expiresIn) {
    const key = this.key(id);
    store.set(key, { payload, expiresAt: expiresIn ? Date.now() + expiresIn * 1000 : Infinity });
    if (payload.grantId) {
      if (!byGrant.has(payload.grantId)) byGrant.set(payload.grantId, new Set());
      byGrant.get(payload.grantId).add(key);
    }
    if (this.model === "Session" && payload.uid) bySessionUid.set(payload.uid, id);
  }

  async find(id) {
    const entry = store.get(this.key(id));
    if (!entry) return undefined;
    if (entry.expiresAt <= Date.now()) {
      store.delete(this.key(id));
      return undefined;
    }
    return entry.payload;
  }

  async findByUid(uid) {
    const id = bySessionUid.get(uid);
    return id === undefined ? undefined : this.find(id);
  }

  async findByUserCode() {
    return undefined; // the device flow is off
  }

  async consume(id) {
    const payload = await this.find(id);
    if (payload) payload.consumed = Math.floor(Date.now() / 1000);
  }

  async destroy(id) {
    store.delete(this.key(id));
  }

  async revokeByGrantId(grantId) {
    for (const key of byGrant.get(grantId) ?? []) store.delete(key);
    byGrant.delete(grantId);
  }
}
