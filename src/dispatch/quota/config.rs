//! The quota keys, as `[quotas]`, `[[auth.keys]] quotas = { … }`, `[tools.<name>] quotas =
//! { … }` and an upstream tool's policy write them, and how they layer: a key's own table over
//! `[quotas]`, key by key; a tool's quota apart, for each principal calling that tool.

use std::collections::HashMap;

use serde::Deserialize;

use super::bucket::Rate;

/// `max_held` when nothing sets it: held requests (`?wait=`, streams) of one principal.
pub const DEFAULT_MAX_HELD: u32 = 64;

/// One quota table: every key unset means unlimited (but `max_held`, see
/// [`DEFAULT_MAX_HELD`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// Calls a minute, on average (a token bucket, as GCRA); unset: unlimited.
    pub calls_per_minute: Option<u32>,
    /// Calls at once from a full bucket; unset: `calls_per_minute`.
    pub burst: Option<u32>,
    /// Calls running at once; unset: unlimited.
    pub max_running: Option<u32>,
    /// Held `?wait=` requests plus open event streams; unset: [`DEFAULT_MAX_HELD`]. A
    /// principal's, never a tool's.
    pub max_held: Option<u32>,
}

impl QuotaConfig {
    /// These keys over `base`: each key set here wins.
    pub fn over(self, base: QuotaConfig) -> QuotaConfig {
        // A burst belongs to its rate: a key that sets its own rate does not inherit a burst
        // sized for another.
        let burst = match self.calls_per_minute {
            Some(_) => self.burst,
            None => self.burst.or(base.burst),
        };
        QuotaConfig {
            calls_per_minute: self.calls_per_minute.or(base.calls_per_minute),
            burst,
            max_running: self.max_running.or(base.max_running),
            max_held: self.max_held.or(base.max_held),
        }
    }

    /// The rate quota, if `calls_per_minute` is set.
    pub fn rate(&self) -> Option<Rate> {
        self.calls_per_minute.map(|per_minute| Rate {
            per_minute,
            burst: self.burst.unwrap_or(per_minute),
        })
    }

    /// Whether a call must be checked against these keys at all.
    pub fn limits_calls(&self) -> bool {
        self.calls_per_minute.is_some() || self.max_running.is_some()
    }

    /// What is wrong with these keys, as (key, message); `of_tool` for a tool's own quota.
    pub fn check(&self, of_tool: bool) -> Result<(), (&'static str, String)> {
        for (key, value) in [
            ("calls_per_minute", self.calls_per_minute),
            ("burst", self.burst),
            ("max_running", self.max_running),
            ("max_held", self.max_held),
        ] {
            if value == Some(0) {
                return Err((key, "must be at least 1".into()));
            }
        }
        if self.burst.is_some() && self.calls_per_minute.is_none() {
            return Err((
                "burst",
                "is the burst of a rate: set calls_per_minute beside it".into(),
            ));
        }
        if of_tool && self.max_held.is_some() {
            return Err((
                "max_held",
                "counts a principal's held requests, which belong to no tool: set it in \
                 [quotas] or on a key"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// The quotas of every principal, as the dispatcher takes them: `[quotas]`, and each key's own
/// table already layered over it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuotaSettings {
    /// Every principal without a table of its own (and the anonymous one, with auth off).
    pub defaults: QuotaConfig,
    /// By key name.
    pub keys: HashMap<String, QuotaConfig>,
}

impl QuotaSettings {
    /// `[quotas]` as `defaults`, and each `(key name, its table)` over it.
    pub fn new(
        defaults: QuotaConfig,
        keys: impl IntoIterator<Item = (String, QuotaConfig)>,
    ) -> Self {
        QuotaSettings {
            defaults,
            keys: keys
                .into_iter()
                .map(|(name, own)| (name, own.over(defaults)))
                .collect(),
        }
    }

    /// The quotas of the principal named `name` (`None`: anonymous).
    pub fn of(&self, name: Option<&str>) -> &QuotaConfig {
        name.and_then(|name| self.keys.get(name))
            .unwrap_or(&self.defaults)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_overrides_the_defaults_key_by_key() {
        let defaults = QuotaConfig {
            calls_per_minute: Some(60),
            burst: Some(5),
            max_held: Some(8),
            ..QuotaConfig::default()
        };
        let own = QuotaConfig {
            calls_per_minute: Some(600),
            max_running: Some(2),
            ..QuotaConfig::default()
        };
        let settings = QuotaSettings::new(defaults, [("agent".to_owned(), own)]);
        let agent = settings.of(Some("agent"));
        assert_eq!(
            agent.rate(),
            Some(Rate {
                per_minute: 600,
                burst: 600
            })
        );
        assert_eq!((agent.max_running, agent.max_held), (Some(2), Some(8)));
        assert_eq!(settings.of(Some("other")).rate().map(|r| r.burst), Some(5));
        assert_eq!(settings.of(None), &defaults);
    }

    #[test]
    fn bad_values_name_their_key() {
        let zero = QuotaConfig {
            max_running: Some(0),
            ..QuotaConfig::default()
        };
        assert_eq!(zero.check(false).unwrap_err().0, "max_running");
        let lone_burst = QuotaConfig {
            burst: Some(3),
            ..QuotaConfig::default()
        };
        assert_eq!(lone_burst.check(false).unwrap_err().0, "burst");
        let held = QuotaConfig {
            max_held: Some(3),
            ..QuotaConfig::default()
        };
        assert!(held.check(false).is_ok());
        assert_eq!(held.check(true).unwrap_err().0, "max_held");
    }
}
