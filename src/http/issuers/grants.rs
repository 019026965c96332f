//! `[[auth.issuers.grants]]`: what a token may do, by what it carries. Each grant gives a role
//! `when` its condition holds: a scope the token's `scope` contains, or a claim (a string, or an
//! array of strings) that contains or equals a value. A token's role is the union of the grants
//! it matches: an admin grant makes it an admin; a token matching none is refused (`403`).
//!
//! A token matching both a caller's and an approver's grant (and no admin's) is refused too:
//! the one rule that holds however a principal signed in is that whoever calls tools never
//! decides on them, and a principal has one role.

use serde::Deserialize;
use serde_json::Value;

use crate::dispatch::who::Role;

/// One grant, as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantConfig {
    /// The condition on the token.
    pub when: ConditionConfig,
    /// The role it gives.
    pub role: Role,
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
        Ok(Grant {
            when: condition,
            role: self.role,
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

/// The role `claims` earn under `grants`.
pub(crate) fn role(
    grants: &[Grant],
    claims: &serde_json::Map<String, Value>,
) -> Result<Role, NoRole> {
    let (mut caller, mut approver) = (false, false);
    for grant in grants.iter().filter(|grant| grant.when.holds(claims)) {
        match grant.role {
            Role::Admin => return Ok(Role::Admin),
            Role::Caller => caller = true,
            Role::Approver => approver = true,
        }
    }
    match (caller, approver) {
        (true, true) => Err(NoRole::CallerAndApprover),
        (true, false) => Ok(Role::Caller),
        (false, true) => Ok(Role::Approver),
        (false, false) => Err(NoRole::NoGrant),
    }
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
            Condition::Scope(scope) => scopes(claims).any(|s| s == scope),
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
        let role = |value| role(&grants, &claims(value));
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
    fn a_condition_is_one_of_three_shapes() {
        for bad in [
            "when = {}",
            "when = { scope = \"a\", claim = \"b\", contains = \"c\" }",
            "when = { claim = \"groups\" }",
            "when = { claim = \"groups\", contains = \"a\", equals = \"b\" }",
            "when = { scope = \" \" }",
        ] {
            let parsed: GrantConfig = toml::from_str(&format!("{bad}\nrole = \"caller\"")).unwrap();
            assert!(parsed.check().is_err(), "{bad}");
        }
    }
}
