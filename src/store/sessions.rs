//! Inbox sessions as stored: what [`SessionStore`](super::SessionStore) keeps for a person signed
//! in to the approval inbox. The session id itself never reaches the store, only its hash.

use super::Timestamp;

/// A person's session of the approval inbox, as stored. The store never sees the session id
/// itself (it lives in the person's cookie), only its SHA-256: a copy of the database lets no
/// one act as anyone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxSession {
    /// The SHA-256 of the session id, in hex: what the session is found by.
    pub id_sha256: String,
    /// The name of the API key the person signed in with; `None` when auth is off.
    pub key_name: Option<String>,
    /// That key's role when they signed in (`approver`, `admin`).
    pub role: String,
    /// A fingerprint of that key (a domain-separated SHA-256 of its token's hash), so that a
    /// session ends when its key is removed or given a new token, even under the same name.
    pub key_fingerprint: Option<String>,
    /// When the person signed in.
    pub created_at: Timestamp,
    /// When the session ends by itself.
    pub expires_at: Timestamp,
    /// The name shown for a person signed in with an identity provider (`name` or `email`).
    pub display_name: Option<String>,
    /// For a person signed in with an identity provider: the globs of the tools whose
    /// approvals they may decide, as a JSON array; `None`: every tool (and every key's session,
    /// whose rights are the key's).
    pub decides: Option<String>,
}
