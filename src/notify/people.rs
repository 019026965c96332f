//! `[[people]]`: who a principal is for the channels that reach approvers where they work (an
//! address to mail, a Slack user to message), and whom a channel's door decides as.
//!
//! A channel reaches a person by the principal's name, as records show it (a key's name,
//! `<issuer>:<subject>` for an identity provider's person). A Slack button or a decision link
//! decides as that person, with the rights toolgate knows for the name without a token: the
//! API key of the same name (its role and `decides`), else the person's own `decides` (an
//! approver's), else none, which lets the person be told but not decide there.

use serde::Deserialize;

use crate::dispatch::who::{Principal, Reach, Role};

/// One `[[people]]` entry, as the file writes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersonConfig {
    /// The principal's name, as records show it (`corp:alice`, a key's name).
    pub name: String,
    /// Where mail reaches the person.
    #[serde(default)]
    pub email: Option<String>,
    /// The person's Slack user id (`U0ALICE`): direct messages, and who pressed a button.
    #[serde(default)]
    pub slack_user: Option<String>,
    /// Globs of the tools whose approvals the person may decide through a channel, for a
    /// person no API key names (an identity provider's person, whose grants need a token).
    #[serde(default)]
    pub decides: Option<Vec<String>>,
}

/// A person the channels reach.
#[derive(Debug, Clone)]
pub struct Person {
    /// The principal's name.
    pub name: String,
    /// Where mail reaches them.
    pub email: Option<String>,
    /// Their Slack user id.
    pub slack_user: Option<String>,
    /// Whom a channel's door decides as, when the person may decide there at all.
    pub principal: Option<Principal>,
}

/// Why `[[people]]` was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct PeopleError(pub String);

/// Everyone the channels reach, by name and by Slack user.
#[derive(Debug, Clone, Default)]
pub struct People {
    people: Vec<Person>,
}

impl People {
    /// Nobody.
    pub fn none() -> Self {
        People::default()
    }

    /// The people of `entries`. `key_principal` gives the principal of the API key of a name,
    /// if one exists; `auth_off` makes everyone the anonymous admin (no names are recorded
    /// then, as for every other door). A name or a Slack user given twice, a blank name, a
    /// `decides` on a person a key names, or a glob that is not one is refused.
    pub fn new(
        entries: &[PersonConfig],
        key_principal: impl Fn(&str) -> Option<Principal>,
        auth_off: bool,
    ) -> Result<Self, PeopleError> {
        let mut people: Vec<Person> = Vec::with_capacity(entries.len());
        for (index, entry) in entries.iter().enumerate() {
            let at = format!("people[{index}]");
            if entry.name.trim().is_empty() {
                return Err(PeopleError(format!("{at}.name may not be blank")));
            }
            if people.iter().any(|person| person.name == entry.name) {
                return Err(PeopleError(format!(
                    "{at}: `{}` is named twice",
                    entry.name
                )));
            }
            if let Some(user) = &entry.slack_user
                && people
                    .iter()
                    .any(|person| person.slack_user.as_ref() == Some(user))
            {
                return Err(PeopleError(format!(
                    "{at}.slack_user: `{user}` is another person's already"
                )));
            }
            for (key, value) in [("email", &entry.email), ("slack_user", &entry.slack_user)] {
                if value.as_ref().is_some_and(|value| value.trim().is_empty()) {
                    return Err(PeopleError(format!("{at}.{key} may not be blank")));
                }
            }
            let principal = if auth_off {
                Some(Principal::new(None, Role::Admin))
            } else {
                match (key_principal(&entry.name), &entry.decides) {
                    (Some(_), Some(_)) => {
                        return Err(PeopleError(format!(
                            "{at}.decides: `{}` is an API key's name, whose own `decides` \
                             holds",
                            entry.name
                        )));
                    }
                    (Some(key), None) => Some(key),
                    (None, Some(globs)) => {
                        let decides = Reach::of(globs)
                            .map_err(|message| PeopleError(format!("{at}.decides: {message}")))?;
                        Some(Principal {
                            decides,
                            tools: Reach::none(),
                            ..Principal::new(Some(entry.name.clone()), Role::Approver)
                        })
                    }
                    (None, None) => None,
                }
            };
            people.push(Person {
                name: entry.name.clone(),
                email: entry.email.clone(),
                slack_user: entry.slack_user.clone(),
                principal,
            });
        }
        Ok(People { people })
    }

    /// The person named `name`.
    pub fn named(&self, name: &str) -> Option<&Person> {
        self.people.iter().find(|person| person.name == name)
    }

    /// The person whose Slack user id is `user`.
    pub fn by_slack_user(&self, user: &str) -> Option<&Person> {
        self.people
            .iter()
            .find(|person| person.slack_user.as_deref() == Some(user))
    }

    /// Everyone, in the file's order.
    pub fn iter(&self) -> impl Iterator<Item = &Person> {
        self.people.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, decides: Option<&[&str]>) -> PersonConfig {
        PersonConfig {
            name: name.into(),
            email: Some(format!("{name}@example.com")),
            slack_user: None,
            decides: decides.map(|globs| globs.iter().map(|g| (*g).to_owned()).collect()),
        }
    }

    fn keys(name: &str) -> Option<Principal> {
        match name {
            "ops" => Some(Principal {
                decides: Reach::of(&["payments__*".to_owned()]).unwrap(),
                ..Principal::new(Some("ops".into()), Role::Approver)
            }),
            "bot" => Some(Principal::new(Some("bot".into()), Role::Caller)),
            _ => None,
        }
    }

    #[test]
    fn a_persons_rights_are_its_keys_else_its_own_decides_else_none() {
        let people = People::new(
            &[
                entry("ops", None),
                entry("corp:alice", Some(&["files__*"])),
                entry("corp:bob", None),
                entry("bot", None),
            ],
            keys,
            false,
        )
        .unwrap();
        let may = |name: &str, tool: &str| {
            (people.named(name).unwrap().principal.as_ref()).is_some_and(|p| p.may_decide(tool))
        };
        assert!(may("ops", "payments__refund") && !may("ops", "files__write"));
        assert!(may("corp:alice", "files__write") && !may("corp:alice", "payments__refund"));
        assert!(
            !may("corp:bob", "files__write"),
            "no key and no decides: told only"
        );
        assert!(
            !may("bot", "files__write"),
            "a caller's key decides nothing"
        );
        let alice = people
            .named("corp:alice")
            .unwrap()
            .principal
            .clone()
            .unwrap();
        assert_eq!(alice.name.as_deref(), Some("corp:alice"));
        assert!(
            !alice.tools.allows("files__write"),
            "deciding is not calling"
        );
    }

    #[test]
    fn twice_the_same_name_or_slack_user_or_a_decides_beside_a_key_is_refused() {
        let err = |entries: &[PersonConfig]| People::new(entries, keys, false).unwrap_err().0;
        assert!(err(&[entry("a", None), entry("a", None)]).contains("named twice"));
        let mut slack = [entry("a", None), entry("b", None)];
        for person in &mut slack {
            person.slack_user = Some("U1".into());
        }
        assert!(err(&slack).contains("another person's"));
        assert!(err(&[entry("ops", Some(&["x"]))]).contains("API key's name"));
        assert!(err(&[entry(" ", None)]).contains("blank"));
    }

    #[test]
    fn with_auth_off_everyone_decides_as_the_anonymous_admin() {
        let people = People::new(&[entry("corp:bob", None)], keys, true).unwrap();
        let bob = people.named("corp:bob").unwrap();
        assert!(bob.principal.as_ref().unwrap().may_decide("anything"));
        assert_eq!(bob.principal.as_ref().unwrap().name, None);
    }
}
