//! Quotas per principal: how many calls a minute (a token bucket, [`bucket`]), how many running
//! at once, how many requests held at once, for each principal (a key's name; with auth off,
//! the one anonymous principal) and, for a tool with its own quota, for each principal calling
//! that tool.
//!
//! The lifecycle asks here before a new call runs ([`Quotas::admit`]), so every door (REST,
//! MCP) gets the same answer; what is not a new call is never counted: a replay answered from
//! an idempotency record gives its cell back ([`CallPermit::settle`]), and an approver's
//! decision and the re-run it starts do not come through here at all. A door that holds a
//! request (`?wait=`, an event stream) takes a [`HeldPermit`] first, so past `max_held` it is
//! refused at once instead of held.
//!
//! Where buckets live: in this process, or, on a store shared by replicas
//! ([`crate::store::Store::shares_quotas`]), in the database, one row per bucket paid by
//! one statement, so replicas together never admit more than one bucket allows (see
//! docs/operating.md, "Quotas"). Counts of running and held requests are this process's own.
//!
//! A server with no quota limiting calls pays one branch per call: [`Quotas::applies`] is two
//! booleans read, and nothing is locked, looked up or allocated.

pub(crate) mod bucket;
pub mod config;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub use bucket::Rate;
pub use config::{DEFAULT_MAX_HELD, QuotaConfig, QuotaSettings};

use super::who::Principal;
use crate::store::{QuotaSpend, Store};

/// Which quota refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaKind {
    /// `calls_per_minute` (with its `burst`).
    CallsPerMinute,
    /// `max_running`.
    MaxRunning,
    /// `max_held`.
    MaxHeld,
}

impl QuotaKind {
    /// The configuration key, as `details.quota` and the metric's `quota` label name it.
    pub fn key(self) -> &'static str {
        match self {
            QuotaKind::CallsPerMinute => "calls_per_minute",
            QuotaKind::MaxRunning => "max_running",
            QuotaKind::MaxHeld => "max_held",
        }
    }
}

/// A request refused by a quota: nothing ran, nothing was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaExceeded {
    /// Which quota.
    pub kind: QuotaKind,
    /// The tool whose own quota it is; `None`: the principal's, across tools.
    pub tool: Option<String>,
    /// The quota's value: calls a minute, calls running or requests held at once.
    pub limit: u32,
    /// The rate, for `calls_per_minute`.
    pub rate: Option<Rate>,
    /// How long until the quota admits a request again (for a count, a guess: 1 s).
    pub retry_after: Duration,
}

impl QuotaExceeded {
    /// The wait in whole seconds, rounded up and at least 1: never earlier than the bucket
    /// can pay.
    pub fn retry_after_s(&self) -> u64 {
        bucket::ceil_s(i64::try_from(self.retry_after.as_micros()).unwrap_or(i64::MAX)).max(1)
    }

    /// The policy's name in the RateLimit fields: `calls`, `running`, `held`, with `.<tool>`
    /// for a tool's own quota.
    pub fn policy_name(&self) -> String {
        let base = match self.kind {
            QuotaKind::CallsPerMinute => "calls",
            QuotaKind::MaxRunning => "running",
            QuotaKind::MaxHeld => "held",
        };
        match &self.tool {
            Some(tool) => format!("{base}.{tool}"),
            None => base.to_owned(),
        }
    }

    /// A sentence saying what was refused and how long to wait.
    pub fn message(&self) -> String {
        let whose = match &self.tool {
            Some(tool) => format!("this caller's quota on tool `{tool}`"),
            None => "this caller's quota".to_owned(),
        };
        let what = match (self.kind, self.rate) {
            (QuotaKind::CallsPerMinute, Some(rate)) => format!(
                "more calls than {whose} allows ({} a minute, {} at once)",
                rate.per_minute, rate.burst
            ),
            (QuotaKind::MaxRunning, _) | (QuotaKind::CallsPerMinute, None) => {
                format!(
                    "{} calls running at once, as many as {whose} allows",
                    self.limit
                )
            }
            (QuotaKind::MaxHeld, _) => format!(
                "{} requests held at once (waits and event streams), as many as {whose} allows",
                self.limit
            ),
        };
        format!(
            "Rate limited: {what}; nothing ran. Retry in {} s.",
            self.retry_after_s()
        )
    }

    /// The envelope's `details`: which quota, its value, and the wait.
    pub fn details(&self) -> Value {
        let mut details = json!({
            "quota": self.kind.key(),
            "limit": self.limit,
            "retry_after_s": self.retry_after_s(),
        });
        if let Some(tool) = &self.tool {
            details["tool"] = json!(tool);
        }
        if let Some(rate) = self.rate {
            details["burst"] = json!(rate.burst);
        }
        details
    }
}

/// What each principal uses now: its buckets' TATs (when kept here) and its counts.
#[derive(Default)]
struct Usage {
    tat: i64,
    running: u32,
    held: u32,
    tools: HashMap<String, ToolUsage>,
}

#[derive(Default)]
struct ToolUsage {
    tat: i64,
    running: u32,
}

/// The entry of `name`, made the first time: its name is copied then only, not on every call.
fn slot<'a, T: Default>(map: &'a mut HashMap<String, T>, name: &str) -> &'a mut T {
    if !map.contains_key(name) {
        map.insert(name.to_owned(), T::default());
    }
    map.get_mut(name).expect("inserted above if it was missing")
}

struct Ledger {
    settings: QuotaSettings,
    /// Whether some principal's quota limits calls (a rate or `max_running`).
    limits_calls: bool,
    /// The local clock's zero, for TATs in microseconds.
    epoch: Instant,
    usage: Mutex<HashMap<String, Usage>>,
    /// The store keeping the buckets, when it is shared by replicas.
    shared: Option<Arc<dyn Store>>,
}

impl super::Dispatcher {
    /// The quotas' permit for a call of `tool` by `principal`, keyed `key`: `None` when no quota
    /// applies, or for a replay (its key has a call, which answers it and spends nothing, so a
    /// spent quota does not refuse it; looked up only once refused: an admitted call reads
    /// nothing). With no quota configured, this is the one branch a call pays.
    pub(super) async fn quota_permit(
        &self,
        principal: &Principal,
        tool: &str,
        tool_quota: &QuotaConfig,
        key: Option<&str>,
    ) -> Result<Option<CallPermit>, super::DispatchError> {
        if !self.quotas.applies(tool_quota) {
            return Ok(None);
        }
        match self.quotas.admit(principal, tool, tool_quota).await {
            Ok(permit) => Ok(Some(permit)),
            Err(refused) => match key {
                Some(key) if self.store.key_taken(tool, key).await? => Ok(None),
                _ => Err(super::DispatchError::RateLimited(Box::new(refused))),
            },
        }
    }
}

/// Every principal's quotas and what they use. Cheap to clone.
#[derive(Clone)]
pub struct Quotas(Arc<Ledger>);

/// A bucket: the principal's (`tool` empty) or its bucket of one tool.
struct Bucket<'a> {
    principal: &'a str,
    tool: Option<&'a str>,
    rate: Rate,
}

impl Quotas {
    /// `settings` for every principal; buckets kept in `shared` (a store shared by replicas),
    /// else here.
    pub fn new(settings: QuotaSettings, shared: Option<Arc<dyn Store>>) -> Self {
        let limits_calls = settings.defaults.limits_calls()
            || settings.keys.values().any(QuotaConfig::limits_calls);
        Quotas(Arc::new(Ledger {
            settings,
            limits_calls,
            epoch: Instant::now(),
            usage: Mutex::new(HashMap::new()),
            shared,
        }))
    }

    /// Whether a call of a tool with `tool_quota` is looked at at all: the call path's one
    /// branch when no quota is configured.
    pub(super) fn applies(&self, tool_quota: &QuotaConfig) -> bool {
        self.0.limits_calls || tool_quota.limits_calls()
    }

    fn usage(&self) -> MutexGuard<'_, HashMap<String, Usage>> {
        // A panic while holding the lock leaves counts, never a broken invariant worth dying for.
        self.0
            .usage
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn now_us(&self) -> i64 {
        i64::try_from(self.0.epoch.elapsed().as_micros()).unwrap_or(i64::MAX)
    }

    /// Admits a new call of `tool` by `principal`, or says which quota refuses it: the running
    /// counts first (given back if a bucket then refuses), then the tool's bucket, then the
    /// principal's.
    pub(super) async fn admit(
        &self,
        principal: &Principal,
        tool: &str,
        tool_quota: &QuotaConfig,
    ) -> Result<CallPermit, QuotaExceeded> {
        let name = principal.name.as_deref().unwrap_or("");
        let own = *self.0.settings.of(principal.name.as_deref());
        let refused = |kind: QuotaKind, of_tool: bool, limit: u32, rate, wait_us: i64| {
            let tool = of_tool.then(|| tool.to_owned());
            crate::metrics::rate_limited(tool.as_deref().unwrap_or(""), kind.key());
            QuotaExceeded {
                kind,
                tool,
                limit,
                rate,
                retry_after: Duration::from_micros(u64::try_from(wait_us).unwrap_or(0)),
            }
        };
        let mut permit = CallPermit {
            quotas: self.clone(),
            principal: name.to_owned(),
            tool: tool.to_owned(),
            counted: None,
            paid: [None, None],
        };
        if own.max_running.is_some() || tool_quota.max_running.is_some() {
            let mut usage = self.usage();
            let usage = slot(&mut usage, name);
            if let Some(max) = own.max_running.filter(|max| usage.running >= *max) {
                return Err(refused(QuotaKind::MaxRunning, false, max, None, 1_000_000));
            }
            let of_tool = slot(&mut usage.tools, tool);
            if let Some(max) = tool_quota.max_running.filter(|max| of_tool.running >= *max) {
                return Err(refused(QuotaKind::MaxRunning, true, max, None, 1_000_000));
            }
            of_tool.running += 1;
            usage.running += 1;
            permit.counted = Some(());
        }
        for (slot, (rate, of_tool)) in [(tool_quota.rate(), true), (own.rate(), false)]
            .into_iter()
            .enumerate()
        {
            let Some(rate) = rate else { continue };
            let bucket = Bucket {
                principal: name,
                tool: of_tool.then_some(tool),
                rate,
            };
            match self.spend(&bucket).await {
                Ok(()) => permit.paid[slot] = Some(rate),
                Err(wait_us) => {
                    permit.refund().await;
                    let kind = QuotaKind::CallsPerMinute;
                    return Err(refused(kind, of_tool, rate.per_minute, Some(rate), wait_us));
                }
            }
        }
        Ok(permit)
    }

    /// Pays one call from `bucket`: `Err` with the wait in microseconds when it cannot. A
    /// shared store that cannot be reached leaves the decision to this process's own bucket:
    /// the call then fails on the store anyway, or the quota holds per replica meanwhile.
    async fn spend(&self, bucket: &Bucket<'_>) -> Result<(), i64> {
        if let Some(store) = &self.0.shared {
            let scope = bucket.tool.unwrap_or("");
            let (interval, tolerance) = (bucket.rate.interval_us(), bucket.rate.tolerance_us());
            match store
                .spend_quota(bucket.principal, scope, interval, tolerance)
                .await
            {
                Ok(QuotaSpend::Paid) => return Ok(()),
                Ok(QuotaSpend::Short { wait_us }) => return Err(wait_us),
                Err(err) => tracing::debug!(error = %err, "quota bucket kept locally for now"),
            }
        }
        let now = self.now_us();
        let mut usage = self.usage();
        let usage = slot(&mut usage, bucket.principal);
        let tat = match bucket.tool {
            Some(tool) => &mut slot(&mut usage.tools, tool).tat,
            None => &mut usage.tat,
        };
        *tat = bucket::spend(*tat, now, bucket.rate)?;
        Ok(())
    }

    /// Gives one call back to `bucket`: it was not a new call after all.
    async fn give_back(&self, bucket: &Bucket<'_>) {
        let interval = bucket.rate.interval_us();
        if let Some(store) = &self.0.shared {
            let scope = bucket.tool.unwrap_or("");
            match store.refund_quota(bucket.principal, scope, interval).await {
                Ok(()) => return,
                Err(err) => tracing::debug!(error = %err, "cannot give a quota cell back"),
            }
        }
        let mut usage = self.usage();
        if let Some(usage) = usage.get_mut(bucket.principal) {
            let tat = match bucket.tool {
                Some(tool) => usage.tools.get_mut(tool).map(|t| &mut t.tat),
                None => Some(&mut usage.tat),
            };
            if let Some(tat) = tat {
                *tat -= interval;
            }
        }
    }

    /// A request of `principal` that will be held (`?wait=`, an event stream), counted until
    /// the permit is dropped; past its `max_held`, refused at once.
    pub fn hold(&self, principal: &Principal) -> Result<HeldPermit, QuotaExceeded> {
        let name = principal.name.as_deref().unwrap_or("");
        let max = self
            .0
            .settings
            .of(principal.name.as_deref())
            .max_held
            .unwrap_or(DEFAULT_MAX_HELD);
        let mut usage = self.usage();
        let usage = slot(&mut usage, name);
        if usage.held >= max {
            crate::metrics::rate_limited("", QuotaKind::MaxHeld.key());
            return Err(QuotaExceeded {
                kind: QuotaKind::MaxHeld,
                tool: None,
                limit: max,
                rate: None,
                retry_after: Duration::from_secs(1),
            });
        }
        usage.held += 1;
        Ok(HeldPermit {
            quotas: self.clone(),
            principal: name.to_owned(),
        })
    }
}

/// A call admitted by its quotas: counted as running until dropped (moved into the call's task,
/// so a call whose client left still counts until it ends).
pub(super) struct CallPermit {
    quotas: Quotas,
    principal: String,
    tool: String,
    /// Set when the call is counted in the running counts.
    counted: Option<()>,
    /// The rates paid: the tool's, the principal's.
    paid: [Option<Rate>; 2],
}

impl CallPermit {
    /// Once the call is answered: a replay (answered from its idempotency record, nothing ran)
    /// gives its cells back.
    pub(super) async fn settle(mut self, replayed: bool) {
        if replayed {
            self.refund().await;
        }
    }

    async fn refund(&mut self) {
        for (slot, rate) in self.paid.iter_mut().enumerate() {
            let Some(rate) = rate.take() else { continue };
            let bucket = Bucket {
                principal: &self.principal,
                tool: (slot == 0).then_some(self.tool.as_str()),
                rate,
            };
            self.quotas.give_back(&bucket).await;
        }
    }
}

impl Drop for CallPermit {
    fn drop(&mut self) {
        if self.counted.take().is_none() {
            return;
        }
        let mut usage = self.quotas.usage();
        if let Some(usage) = usage.get_mut(&self.principal) {
            usage.running = usage.running.saturating_sub(1);
            if let Some(tool) = usage.tools.get_mut(&self.tool) {
                tool.running = tool.running.saturating_sub(1);
            }
        }
    }
}

/// A held request of one principal, counted against its `max_held` until dropped.
pub struct HeldPermit {
    quotas: Quotas,
    principal: String,
}

impl Drop for HeldPermit {
    fn drop(&mut self) {
        if let Some(usage) = self.quotas.usage().get_mut(&self.principal) {
            usage.held = usage.held.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::who::Role;

    fn agent() -> Principal {
        Principal::new(Some("agent".into()), Role::Caller)
    }

    fn quotas(defaults: QuotaConfig) -> Quotas {
        Quotas::new(QuotaSettings::new(defaults, []), None)
    }

    #[tokio::test]
    async fn a_rate_refuses_past_its_burst_and_a_replay_gives_its_cell_back() {
        let quotas = quotas(QuotaConfig {
            calls_per_minute: Some(60),
            burst: Some(2),
            ..QuotaConfig::default()
        });
        let none = QuotaConfig::default();
        assert!(quotas.applies(&none));
        let first = quotas.admit(&agent(), "echo", &none).await.unwrap();
        first.settle(true).await;
        for _ in 0..2 {
            quotas
                .admit(&agent(), "echo", &none)
                .await
                .unwrap()
                .settle(false)
                .await;
        }
        let Err(refused) = quotas.admit(&agent(), "echo", &none).await else {
            panic!("past the burst");
        };
        assert_eq!(refused.kind, QuotaKind::CallsPerMinute);
        assert_eq!(refused.retry_after_s(), 1);
        assert_eq!(refused.policy_name(), "calls");
        // Another principal has its own bucket.
        assert!(
            quotas
                .admit(&Principal::anonymous(), "echo", &none)
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn running_and_held_counts_end_with_their_permits() {
        let quotas = quotas(QuotaConfig {
            max_running: Some(1),
            max_held: Some(1),
            ..QuotaConfig::default()
        });
        let none = QuotaConfig::default();
        let running = quotas.admit(&agent(), "echo", &none).await.unwrap();
        let refused = quotas.admit(&agent(), "echo", &none).await.err().unwrap();
        assert_eq!(refused.kind, QuotaKind::MaxRunning);
        drop(running);
        assert!(quotas.admit(&agent(), "echo", &none).await.is_ok());
        let held = quotas.hold(&agent()).unwrap();
        assert_eq!(
            quotas.hold(&agent()).err().unwrap().kind,
            QuotaKind::MaxHeld
        );
        drop(held);
        assert!(quotas.hold(&agent()).is_ok());
    }

    #[tokio::test]
    async fn no_quota_is_not_looked_at() {
        let quotas = quotas(QuotaConfig::default());
        assert!(!quotas.applies(&QuotaConfig::default()));
        let tool = QuotaConfig {
            calls_per_minute: Some(1),
            ..QuotaConfig::default()
        };
        assert!(quotas.applies(&tool));
        quotas.admit(&agent(), "echo", &tool).await.unwrap();
        let refused = quotas.admit(&agent(), "echo", &tool).await.err().unwrap();
        assert_eq!(refused.tool.as_deref(), Some("echo"));
        assert_eq!(refused.policy_name(), "calls.echo");
        assert_eq!(refused.retry_after_s(), 60);
    }
}
