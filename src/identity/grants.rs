//! `[[auth.issuers.grants]]`: what a token may do, by what it carries. Each grant gives a role
//! `when` its condition holds: a scope the token's `scope` contains (or a broader scope of the
//! same hierarchy: `refunds` holds for `refunds:write`), or a claim (a string, or an array of
//! strings) that contains or equals a value. A token's rights are the union of the grants it
//! matches: an admin grant makes it an admin; its `tools` are those of its caller and admin
//! grants, its `decides` those of its approver and admin grants; a token matching none is
//! refused (`403`).
//!
//! A token matching both a caller's and an approver's grant (and no admin's) is refused too:
//! the one rule that holds however a principal signed in is that whoever calls tools never
//! decides on them, and a principal has one role.

use serde::Deserialize;
use serde_json::Value;

use crate::dispatch::who::{Reach, Role, scope_grants};

/// One grant, as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantConfig {
    /// The condition on the token.
    pub when: ConditionConfig,
    /// The role it gives.
    pub role: Role,
    /// Globs of the tools it may list and call (default `["*"]`).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Globs of the tools whose approvals it may see and decide (default `["*"]`).
    #[serde(default)]
    pub decides: Option<Vec<String>>,
}

/// A grant's condition, as written: `{ scope = "…" }`, `{ claim = "…", contains = "…" }` or
/// `{ claim = "…", equals = "…" }`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionConfig {
    /// A scope the token's `scope` (space-separated) must contain.
    #[serde(default)]
    pub scope: Option<String>,
    /// The claim to look at.
    #[serde(default)]
    pub claim: Option<String>,
    /// A value the claim (an array, or a space-separated string) must contain.
    #[serde(default)]
    pub contains: Option<String>,
    /// The value the claim must be.
    #[serde(default)]
    pub equals: Option<String>,
}

/// A checked grant.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Grant {
    when: Condition,
    role: Role,
    tools: Reach,
    decides: Reach,
}

#[derive(Debug, Clone, PartialEq)]
enum Condition {
    Scope(String),
    Contains { claim: String, value: String },
    Equals { claim: String, value: String },
}

impl GrantConfig {
    pub(super) fn check(&self) -> Result<Grant, String> {
        let when = &self.when;
        let blank = |value: &Option<String>| value.as_deref().is_some_and(|v| v.trim().is_empty());
        if blank(&when.scope) || blank(&when.claim) || blank(&when.contains) || blank(&when.equals)
        {
            return Err("a grant's condition has an empty value".into());
        }
        let condition = match (&when.scope, &when.claim, &when.contains, &when.equals) {
            (Some(scope), None, None, None) => Condition::Scope(scope.clone()),
            (None, Some(claim), Some(value), None) => Condition::Contains {
                claim: claim.clone(),
                value: value.clone(),
            },
            (None, Some(claim), None, Some(value)) => Condition::Equals {
                claim: claim.clone(),
                value: value.clone(),
            },
            _ => {
                return Err(
                    "a grant's `when` is `{ scope = \"…\" }`, `{ claim = \"…\", contains = \
                     \"…\" }` or `{ claim = \"…\", equals = \"…\" }`"
                        .into(),
                );
            }
        };
        if let Some((field, why)) = self
            .role
            .idle_reach(self.tools.is_some(), self.decides.is_some())
        {
            return Err(format!("a grant's `{field}`: {why}"));
        }
        let reach = |globs: &Option<Vec<String>>, field: &str| match globs {
            None => Ok(Reach::all()),
            Some(globs) => Reach::of(globs).map_err(|why| format!("a grant's `{field}`: {why}")),
        };
        Ok(Grant {
            when: condition,
            role: self.role,
            tools: reach(&self.tools, "tools")?,
            decides: reach(&self.decides, "decides")?,
        })
    }
}

/// Why no role comes of a token's grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoRole {
    /// It matches no grant.
    NoGrant,
    /// It matches a caller's grant and an approver's.
    CallerAndApprover,
}

/// What a token's grants give it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rights {
    pub(crate) role: Role,
    pub(crate) tools: Reach,
    pub(crate) decides: Reach,
}

/// The rights `claims` earn under `grants`.
pub(crate) fn rights(
    grants: &[Grant],
    claims: &serde_json::Map<String, Value>,
) -> Result<Rights, NoRole> {
    let (mut caller, mut approver, mut admin) = (false, false, false);
    let (mut tools, mut decides): (Option<Reach>, Option<Reach>) = (None, None);
    let widen = |reach: &mut Option<Reach>, more: &Reach| {
        *reach = Some(match reach.take() {
            None => more.clone(),
            Some(reach) => reach.union(more),
        });
    };
    for grant in grants.iter().filter(|grant| grant.when.holds(claims)) {
        match grant.role {
            Role::Admin => admin = true,
            Role::Caller => caller = true,
            Role::Approver => approver = true,
        }
        if grant.role != Role::Approver {
            widen(&mut tools, &grant.tools);
        }
        if grant.role != Role::Caller {
            widen(&mut decides, &grant.decides);
        }
    }
    let role = match (admin, caller, approver) {
        (true, _, _) => Role::Admin,
        (false, true, true) => return Err(NoRole::CallerAndApprover),
        (false, true, false) => Role::Caller,
        (false, false, true) => Role::Approver,
        (false, false, false) => return Err(NoRole::NoGrant),
    };
    Ok(Rights {
        role,
        tools: tools.unwrap_or_default(),
        decides: decides.unwrap_or_default(),
    })
}

/// The scopes a token carries: its `scope` (space-separated, RFC 9068), or `scp` (a string or
/// an array, as some providers write it).
pub(crate) fn scopes(claims: &serde_json::Map<String, Value>) -> impl Iterator<Item = &str> {
    ["scope", "scp"]
        .into_iter()
        .flat_map(|name| words(claims.get(name)))
}

/// The words of a claim: a space-separated string's, or an array's strings.
fn words(value: Option<&Value>) -> Vec<&str> {
    match value {
        Some(Value::String(text)) => text.split_ascii_whitespace().collect(),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

impl Grant {
    /// The role it gives.
    pub(crate) fn role(&self) -> Role {
        self.role
    }

    /// The scope this grant asks for, if its condition is a scope.
    pub(crate) fn scope(&self) -> Option<&str> {
        match &self.when {
            Condition::Scope(scope) => Some(scope),
            _ => None,
        }
    }
}

impl Condition {
    fn holds(&self, claims: &serde_json::Map<String, Value>) -> bool {
        match self {
            Condition::Scope(scope) => scopes(claims).any(|held| scope_grants(held, scope)),
            Condition::Contains { claim, value } => match claims.get(claim) {
                Some(Value::Array(items)) => items.iter().any(|item| item.as_str() == Some(value)),
                Some(Value::String(text)) => text.split_ascii_whitespace().any(|w| w == value),
                _ => false,
            },
            Condition::Equals { claim, value } => match claims.get(claim) {
                Some(Value::String(text)) => text == value,
                Some(Value::Bool(b)) => b.to_string() == *value,
                Some(Value::Number(n)) => n.to_string() == *value,
                _ => false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grants(toml: &str) -> Vec<Grant> {
        #[derive(Deserialize)]
        struct Grants {
            grants: Vec<GrantConfig>,
        }
        let parsed: Grants = toml::from_str(toml).unwrap();
        parsed.grants.iter().map(|g| g.check().unwrap()).collect()
    }

    fn claims(value: Value) -> serde_json::Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_tokens_role_is_the_union_of_its_grants_and_a_caller_never_decides() {
        let grants = grants(
            "[[grants]]\nwhen = { scope = \"tools:call\" }\nrole = \"caller\"\n\
             [[grants]]\nwhen = { claim = \"groups\", contains = \"finance\" }\nrole = \"approver\"\n\
             [[grants]]\nwhen = { claim = \"tenant_admin\", equals = \"true\" }\nrole = \"admin\"\n",
        );
        let role = |value| rights(&grants, &claims(value)).map(|rights| rights.role);
        assert_eq!(
            role(json!({"scope": "openid tools:call"})),
            Ok(Role::Caller)
        );
        assert_eq!(role(json!({"scp": ["tools:call"]})), Ok(Role::Caller));
        assert_eq!(role(json!({"scope": "tools:callx"})), Err(NoRole::NoGrant));
        assert_eq!(
            role(json!({"groups": ["support", "finance"]})),
            Ok(Role::Approver)
        );
        assert_eq!(role(json!({"groups": "finance"})), Ok(Role::Approver));
        assert_eq!(role(json!({"groups": ["finances"]})), Err(NoRole::NoGrant));
        assert_eq!(
            role(json!({"scope": "tools:call", "groups": ["finance"]})),
            Err(NoRole::CallerAndApprover)
        );
        assert_eq!(
            role(json!({"scope": "tools:call", "groups": ["finance"], "tenant_admin": true})),
            Ok(Role::Admin)
        );
        assert_eq!(role(json!({})), Err(NoRole::NoGrant));
    }

    #[test]
    fn tools_and_decides_are_the_union_of_the_grants_of_their_roles() {
        let grants = grants(
            "[[grants]]\nwhen = { scope = \"payments\" }\nrole = \"caller\"\n\
             tools = [\"payments__*\"]\n\
             [[grants]]\nwhen = { scope = \"files:read\" }\nrole = \"caller\"\n\
             tools = [\"files__read_*\"]\n\
             [[grants]]\nwhen = { claim = \"groups\", contains = \"finance\" }\n\
             role = \"approver\"\ndecides = [\"payments__*\"]\n\
             [[grants]]\nwhen = { claim = \"groups\", contains = \"ops\" }\nrole = \"admin\"\n\
             tools = [\"files__*\"]\ndecides = [\"files__*\"]\n",
        );
        let rights_of = |value| rights(&grants, &claims(value)).unwrap();
        // A broader scope holds for the narrower one a grant names.
        let both = rights_of(json!({"scope": "payments files"}));
        assert_eq!(both.role, Role::Caller);
        assert!(both.tools.allows("payments__refund") && both.tools.allows("files__read_dir"));
        assert!(!both.tools.allows("files__write"));
        let payments = rights_of(json!({"scope": "payments"}));
        assert!(!payments.tools.allows("files__read_dir"));
        // A narrower scope does not hold for the broader one.
        assert_eq!(
            rights(&grants, &claims(json!({"scope": "payments:write"}))),
            Err(NoRole::NoGrant)
        );
        let finance = rights_of(json!({"groups": ["finance"]}));
        assert_eq!(finance.role, Role::Approver);
        assert!(finance.decides.allows("payments__refund") && !finance.decides.allows("files__x"));
        // An admin's tools are its caller and admin grants'; its decides, its approver and
        // admin grants'.
        let ops = rights_of(json!({"groups": ["ops", "finance"], "scope": "payments"}));
        assert_eq!(ops.role, Role::Admin);
        assert!(ops.tools.allows("payments__refund") && ops.tools.allows("files__write"));
        assert!(ops.decides.allows("payments__refund") && ops.decides.allows("files__write"));
        assert!(!ops.decides.allows("echo") && !ops.tools.allows("echo"));
    }

    #[test]
    fn a_condition_is_one_of_three_shapes() {
        for bad in [
            "when = {}",
            "when = { scope = \"a\", claim = \"b\", contains = \"c\" }",
            "when = { claim = \"groups\" }",
            "when = { claim = \"groups\", contains = \"a\", equals = \"b\" }",
            "when = { scope = \" \" }",
            "when = { scope = \"a\" }\ntools = [\"x/y\"]",
        ] {
            let parsed: GrantConfig = toml::from_str(&format!("{bad}\nrole = \"caller\"")).unwrap();
            assert!(parsed.check().is_err(), "{bad}");
        }
        let idle = "when = { scope = \"a\" }\nrole = \"caller\"\ndecides = [\"x\"]";
        let parsed: GrantConfig = toml::from_str(idle).unwrap();
        assert_eq!(
            parsed.check().unwrap_err(),
            "a grant's `decides`: a caller decides nothing"
        );
    }
}
