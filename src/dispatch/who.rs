//! Who asks, and what they may see: the visibility rule of calls, written once.
//!
//! Every door admits a request as a [`Principal`] (REST and MCP from a bearer key or an identity
//! provider's token, the inbox from its session) and hands it to the lifecycle, which applies
//! the rules:
//! - a caller sees only its own calls (their records, their events, a reconciliation they wait
//!   on); an approver or an admin sees every call of a tool its `decides` reaches, and a call
//!   an escalation reached it for (the whole rule is `Dispatcher::may_see`, in `visible`,
//!   which every read applies);
//! - a tool outside a principal's `tools` does not exist for it: not listed, and `unknown_tool`
//!   when called;
//! - an approval of a tool outside its `decides` does not exist for it either: not listed, and
//!   `unknown_token` when decided.
//!
//! A call or an approval another principal may not see is answered as if it did not exist, so
//! its id tells nothing.

use std::sync::Arc;

use serde::Deserialize;

use crate::contract::registry::glob_matches;

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

impl Role {
    /// Which of `tools` and `decides`, if set for this role, it would never use, and why: an
    /// approver calls no tools, a caller decides nothing. Set anyway, it is a mistake to say.
    pub fn idle_reach(self, tools: bool, decides: bool) -> Option<(&'static str, &'static str)> {
        match self {
            Role::Approver if tools => Some(("tools", "an approver calls no tools")),
            Role::Caller if decides => Some(("decides", "a caller decides nothing")),
            _ => None,
        }
    }
}

/// Which tools a principal reaches, by name: every one, or those its globs match (`*` stands
/// for any run of characters: `payments__*`). Cheap to clone: the globs are shared.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Reach(Option<Arc<[String]>>);

impl Reach {
    /// Every tool.
    pub fn all() -> Reach {
        Reach(None)
    }

    /// The tools `globs` match; a `*` among them is every tool. A glob is one or more of the
    /// characters of a tool name (`A-Z a-z 0-9 _ -`), `*` (any run of them) and `?` (one).
    pub fn of(globs: &[String]) -> Result<Reach, String> {
        for glob in globs {
            let allowed =
                |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'*' | b'?');
            if glob.is_empty() || glob.len() > 128 || !glob.bytes().all(allowed) {
                return Err(format!(
                    "`{glob}` is not a glob of tool names (letters, digits, `_`, `-`, `*` and `?`)"
                ));
            }
        }
        if globs.iter().any(|glob| glob.bytes().all(|b| b == b'*')) {
            return Ok(Reach::all());
        }
        let mut globs = globs.to_vec();
        globs.sort();
        globs.dedup();
        Ok(Reach(Some(globs.into())))
    }

    /// No tool.
    pub fn none() -> Reach {
        Reach(Some(Arc::from([])))
    }

    /// Whether this reaches every tool (nothing to filter).
    pub fn is_all(&self) -> bool {
        self.0.is_none()
    }

    /// Whether this reaches the tool `name`.
    pub fn allows(&self, name: &str) -> bool {
        match &self.0 {
            None => true,
            Some(globs) => globs.iter().any(|glob| glob_matches(glob, name)),
        }
    }

    /// What either reaches.
    pub fn union(&self, other: &Reach) -> Reach {
        match (&self.0, &other.0) {
            (None, _) | (_, None) => Reach::all(),
            (Some(a), Some(b)) => {
                let mut globs: Vec<String> = a.iter().chain(b.iter()).cloned().collect();
                globs.sort();
                globs.dedup();
                Reach(Some(globs.into()))
            }
        }
    }

    /// The globs, for a page that says what a principal reaches; `None`: every tool.
    pub fn globs(&self) -> Option<&[String]> {
        self.0.as_deref()
    }
}

/// Whether the scope `held` grants `needed`: the same scope, or a broader one of the same
/// hierarchy (`refunds` grants `refunds:write` and `refunds:write:eu`, as MCP's authorization
/// asks; `refund` does not grant `refunds:write`). A scope that is a URI
/// (`api://toolgate/refunds`, `https://…`) has no such hierarchy: only itself grants it.
pub fn scope_grants(held: &str, needed: &str) -> bool {
    needed == held
        || (!held.contains('/')
            && !needed.contains('/')
            && needed
                .strip_prefix(held)
                .is_some_and(|rest| rest.starts_with(':')))
}

/// Who is asking: inserted into every authorized request's extensions by the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The name recorded as the actor of what it does (a key's name, `<issuer>:<subject>` for
    /// an identity provider's token); `None` when auth is off.
    pub name: Option<String>,
    /// What it may do.
    pub role: Role,
    /// The tools it may list and call.
    pub tools: Reach,
    /// The tools whose approvals (and calls) it may see and decide.
    pub decides: Reach,
    /// The scopes of its token, checked against a tool's `required_scopes`; `None` for an API
    /// key or auth off, which `required_scopes` do not restrict (a key's rights are its
    /// configuration).
    pub scopes: Option<Arc<[String]>>,
    /// The name shown for a person signed in with an identity provider, recorded beside the
    /// actor's name on what they decide.
    pub display: Option<String>,
    /// A token's verified claims, which approval conditions may read (`principal.claims`);
    /// `None` for an API key or auth off.
    pub claims: Option<Arc<serde_json::Map<String, serde_json::Value>>>,
    /// The identity provider's access token it was admitted with, kept (as a secret) for an
    /// upstream that acts as the caller (`[upstreams.auth]`); `None` for an API key, a signed-in
    /// person or auth off.
    pub token: Option<crate::base::CallerToken>,
}

impl Principal {
    /// A principal reaching every tool, without scopes (an API key's, before its `tools` and
    /// `decides` are applied).
    pub fn new(name: Option<String>, role: Role) -> Self {
        Principal {
            name,
            role,
            tools: Reach::all(),
            decides: Reach::all(),
            scopes: None,
            display: None,
            claims: None,
            token: None,
        }
    }

    /// Who acts, as the call's history records it.
    pub fn actor(&self) -> crate::store::Actor {
        crate::store::Actor {
            name: self.name.clone(),
            display: self.display.clone(),
        }
    }

    /// The principal of a server without keys: anonymous, and an admin.
    pub fn anonymous() -> Self {
        Principal::new(None, Role::Admin)
    }

    /// Whether this principal is an admin.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Whether this principal may see every call (of the tools it decides), not only its own.
    pub fn sees_all_calls(&self) -> bool {
        self.role != Role::Caller
    }

    /// Whether this principal's own reach shows it a call of `tool` made by `caller`: its own,
    /// or (an approver's or admin's) one of a tool it decides. The whole rule, which an
    /// escalation widens, is `Dispatcher::may_see`.
    pub(super) fn sees_by_reach(&self, caller: Option<&str>, tool: &str) -> bool {
        caller == self.name.as_deref() || (self.sees_all_calls() && self.decides.allows(tool))
    }

    /// Whether this principal may see and decide an approval of `tool`.
    pub fn may_decide(&self, tool: &str) -> bool {
        self.sees_all_calls() && self.decides.allows(tool)
    }

    /// Whether an escalated approval whose policy names `escalate_to` reaches this principal:
    /// an approver or admin whose `decides` allows one of the names, or whose token's `groups`
    /// claim holds one. A caller never decides, escalated or not.
    pub fn reached_by_escalation(&self, escalate_to: &[String]) -> bool {
        if !self.sees_all_calls() {
            return false;
        }
        let groups = self
            .claims
            .as_deref()
            .and_then(|claims| claims.get("groups"))
            .and_then(serde_json::Value::as_array);
        escalate_to.iter().any(|name| {
            self.decides.allows(name)
                || groups.is_some_and(|groups| groups.iter().any(|g| g.as_str() == Some(name)))
        })
    }

    /// Whether this is an admin deciding every tool: nothing to check before it decides.
    pub fn decides_everything(&self) -> bool {
        self.role == Role::Admin && self.decides.is_all()
    }

    /// The scopes of `required` this principal's token lacks (none for a principal without a
    /// token, which scopes do not restrict).
    pub fn missing_scopes<'a>(&self, required: &'a [String]) -> Vec<&'a str> {
        let Some(held) = &self.scopes else {
            return Vec::new();
        };
        required
            .iter()
            .filter(|needed| !held.iter().any(|held| scope_grants(held, needed)))
            .map(String::as_str)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach(globs: &[&str]) -> Reach {
        Reach::of(&globs.iter().map(|g| g.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn a_caller_sees_only_its_own_calls() {
        let agent = Principal::new(Some("agent".into()), Role::Caller);
        assert!(agent.sees_by_reach(Some("agent"), "echo"));
        assert!(!agent.sees_by_reach(Some("other"), "echo"));
        assert!(!agent.sees_by_reach(None, "echo"));
        assert!(!agent.may_decide("echo"));
        let ops = Principal::new(Some("ops".into()), Role::Approver);
        assert!(ops.sees_by_reach(Some("agent"), "echo"));
        assert!(Principal::anonymous().sees_by_reach(Some("agent"), "echo"));
    }

    #[test]
    fn an_approver_sees_and_decides_only_the_tools_it_decides() {
        let finance = Principal {
            decides: reach(&["payments__*", "issue_refund"]),
            ..Principal::new(Some("finance".into()), Role::Approver)
        };
        assert!(finance.may_decide("payments__refund"));
        assert!(finance.may_decide("issue_refund"));
        assert!(!finance.may_decide("files__write"));
        assert!(!finance.sees_by_reach(Some("agent"), "files__write"));
        assert!(finance.sees_by_reach(Some("agent"), "payments__charge"));
        // An admin deciding few tools still sees its own calls of every tool.
        let admin = Principal {
            decides: reach(&["files__*"]),
            ..Principal::new(Some("ops".into()), Role::Admin)
        };
        assert!(admin.sees_by_reach(Some("ops"), "payments__charge"));
        assert!(!admin.sees_by_reach(Some("agent"), "payments__charge"));
        assert!(!admin.may_decide("payments__charge"));
    }

    #[test]
    fn globs_match_whole_names() {
        let cases = [
            ("*", "anything", true),
            ("echo", "echo", true),
            ("echo", "echo2", false),
            ("echo*", "echo", true),
            ("echo*", "echo_twice", true),
            ("*_file", "write_file", true),
            ("*_file", "write_files", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "abcbc", true),
            ("a*b*c", "acb", false),
            ("files__*", "files__read", true),
            ("files__*", "payments__read", false),
            ("**", "", true),
            ("echo?", "echo2", true),
            ("echo?", "echo", false),
        ];
        for (glob, name, expected) in cases {
            assert_eq!(glob_matches(glob, name), expected, "{glob} ~ {name}");
        }
        assert!(reach(&["a", "*"]).is_all());
        assert!(Reach::of(&["files/*".into()]).is_err());
        assert!(Reach::of(&["".into()]).is_err());
        let union = reach(&["a*"]).union(&reach(&["b"]));
        assert!(union.allows("abc") && union.allows("b") && !union.allows("c"));
        assert!(reach(&["a"]).union(&Reach::all()).is_all());
    }

    #[test]
    fn a_broader_scope_grants_the_narrower_ones_of_its_hierarchy() {
        assert!(scope_grants("refunds", "refunds:write"));
        assert!(scope_grants("refunds", "refunds"));
        assert!(scope_grants("refunds:write", "refunds:write"));
        assert!(!scope_grants("refunds:write", "refunds"));
        assert!(!scope_grants("refund", "refunds:write"));
        assert!(!scope_grants("refunds:read", "refunds:write"));
        assert!(!scope_grants("api", "api://toolgate/refunds"));
        assert!(!scope_grants("https", "https://api.example.com/refunds"));
        assert!(scope_grants(
            "api://toolgate/refunds",
            "api://toolgate/refunds"
        ));
        let token = Principal {
            scopes: Some(vec!["tools:call".into(), "refunds".into()].into()),
            ..Principal::new(Some("corp:agent".into()), Role::Caller)
        };
        let required = vec!["refunds:write".to_string(), "payments:write".to_string()];
        assert_eq!(token.missing_scopes(&required), ["payments:write"]);
        let key = Principal::new(Some("agent".into()), Role::Caller);
        assert!(key.missing_scopes(&required).is_empty());
    }
}
