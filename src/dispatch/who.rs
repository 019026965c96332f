//! Who asks, and what they may see: the visibility rule of calls, written once.
//!
//! Every door admits a request as a [`Principal`] (REST and MCP from a bearer key, the inbox
//! from its session) and hands it to the lifecycle, which applies the one rule: a caller sees
//! only its own calls (their records, their events, a reconciliation they wait on); an approver
//! or an admin sees every call. A call another caller owns is answered as if it did not exist,
//! so its id tells nothing.

use serde::Deserialize;

/// What a principal may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Calls tools and reads its own calls.
    Caller,
    /// Approves, rejects and completes suspensions; reads and settles calls.
    Approver,
    /// Everything.
    Admin,
}

/// Who is asking: inserted into every authorized request's extensions by the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key's name, recorded as the actor of what it does; `None` when auth is off.
    pub name: Option<String>,
    /// What it may do.
    pub role: Role,
}

impl Principal {
    /// The principal of a server without keys: anonymous, and an admin.
    pub fn anonymous() -> Self {
        Principal {
            name: None,
            role: Role::Admin,
        }
    }

    /// Whether this principal may see every call, not only its own.
    pub fn sees_all_calls(&self) -> bool {
        self.role != Role::Caller
    }

    /// Whether this principal may see a call made by `caller`.
    pub fn may_see(&self, caller: &Option<String>) -> bool {
        self.sees_all_calls() || *caller == self.name
    }

    /// The only caller whose calls this principal may see, for a filter over many calls (the
    /// change feed): `None` when it sees all of them.
    pub fn only_own(&self) -> Option<Option<String>> {
        (!self.sees_all_calls()).then(|| self.name.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_sees_only_its_own_calls() {
        let agent = Principal {
            name: Some("agent".into()),
            role: Role::Caller,
        };
        assert!(agent.may_see(&Some("agent".into())));
        assert!(!agent.may_see(&Some("other".into())));
        assert!(!agent.may_see(&None));
        assert_eq!(agent.only_own(), Some(Some("agent".into())));
        let ops = Principal {
            name: Some("ops".into()),
            role: Role::Approver,
        };
        assert!(ops.may_see(&Some("agent".into())));
        assert_eq!(ops.only_own(), None);
        assert!(Principal::anonymous().may_see(&Some("agent".into())));
    }
}
