//! The tools a dispatcher serves now: one generation at a time, replaced whole when an upstream
//! MCP server's tool list changes.
//!
//! A call takes the current [`Generation`] once and runs on it to the end, so a tool that goes
//! away mid-call still finishes, and a list that changes never shows a call half of one
//! generation and half of the next. A tool keeps its [`ToolPolicy`] (its concurrency slots, its
//! metrics) from one generation to the next. What is derived from the list (the serialized
//! `GET /tools`, the OpenAPI document, the MCP catalog) is rebuilt from a new generation the
//! first time it is asked for: see [`Derived`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use crate::contract::erased::DynTool;
use crate::contract::registry::{Registered, RegistryError, ToolSet};
use crate::contract::retry::RetryPolicy;
use crate::metrics::ToolMetrics;
use crate::slots::Slots;

use super::who::Reach;
use super::{DispatchConfig, ToolSettings};

/// One tool's settings, with its retry policy adjusted to its effect, its concurrency gate, and
/// its metrics.
pub(crate) struct ToolPolicy {
    pub(crate) settings: ToolSettings,
    pub(crate) retry: RetryPolicy,
    /// Retries of a request that provably never reached the tool's backend: the configured
    /// policy, whatever the effect (nothing ran that a retry could repeat).
    pub(crate) resend: RetryPolicy,
    pub(crate) slots: Arc<Slots>,
    pub(crate) metrics: ToolMetrics,
}

/// A registered tool and its policy: what one call runs with.
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) registered: Arc<Registered>,
    pub(crate) policy: Arc<ToolPolicy>,
}

/// The tool set as it stands, with each tool's policy; numbered, so what is derived from it
/// knows when it is stale.
pub struct Generation {
    number: u64,
    tools: ToolSet,
    policies: HashMap<String, Arc<ToolPolicy>>,
}

impl Generation {
    /// Counts up by one each time the tool set changes.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The tools.
    pub fn tools(&self) -> &ToolSet {
        &self.tools
    }

    pub(crate) fn entry(&self, name: &str) -> Option<Entry> {
        Some(Entry {
            registered: self.tools.lookup_shared(name)?.clone(),
            policy: self.policies.get(name)?.clone(),
        })
    }

    pub(crate) fn policy(&self, name: &str) -> Option<&ToolPolicy> {
        self.policies.get(name).map(Arc::as_ref)
    }

    /// Every tool's name and policy.
    pub(crate) fn policies(&self) -> impl Iterator<Item = (&str, &ToolPolicy)> {
        self.policies
            .iter()
            .map(|(name, policy)| (name.as_str(), policy.as_ref()))
    }
}

impl std::ops::Deref for Generation {
    type Target = ToolSet;

    fn deref(&self) -> &ToolSet {
        &self.tools
    }
}

/// The current generation, and what a new one's policies are made from.
pub(crate) struct Live {
    current: RwLock<Arc<Generation>>,
    /// Taken by whoever builds the next generation, so two changes never lose one another.
    replacing: Mutex<()>,
    config: DispatchConfig,
}

impl Live {
    pub(crate) fn new(tools: ToolSet, config: &DispatchConfig) -> Live {
        let live = Live {
            current: RwLock::new(Arc::new(Generation {
                number: 0,
                tools: ToolSet::new(),
                policies: HashMap::new(),
            })),
            replacing: Mutex::new(()),
            config: config.clone(),
        };
        live.install(tools);
        live
    }

    /// Whether any tool's settings name `required_scopes`.
    pub(crate) fn requires_scopes(&self) -> bool {
        self.config
            .tools
            .values()
            .any(|tool| !tool.required_scopes.is_empty())
    }

    /// The generation serving now.
    pub(crate) fn current(&self) -> Arc<Generation> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the tools of the upstream `source` with `tools`. Those that cannot be
    /// registered (see [`ToolSet::with_source`]) are left out and returned.
    pub(crate) fn replace_source(
        &self,
        source: &str,
        tools: Vec<Arc<dyn DynTool>>,
    ) -> Vec<RegistryError> {
        let _replacing = self
            .replacing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (next, errors) = self.current().tools.with_source(source, tools);
        self.install(next);
        errors
    }

    /// Makes `tools` the current generation, keeping the policy of each tool that stays.
    fn install(&self, tools: ToolSet) {
        let previous = self.current();
        let policies = tools
            .iter()
            .map(|tool| {
                let policy = match previous.policies.get(tool.name()) {
                    // Same name, same effect: the slots in use and the metrics carry over.
                    Some(policy)
                        if RetryPolicy::for_effect(tool.effect(), self.config.retry)
                            == policy.retry =>
                    {
                        policy.clone()
                    }
                    // Another effect (an upstream's annotations changed): another retry
                    // policy, but the same slots, so the calls running still count.
                    Some(policy) => Arc::new(ToolPolicy {
                        slots: policy.slots.clone(),
                        ..self.policy_of(tool)
                    }),
                    None => Arc::new(self.policy_of(tool)),
                };
                (tool.name().to_owned(), policy)
            })
            .collect();
        let next = Arc::new(Generation {
            number: previous.number + 1,
            tools,
            policies,
        });
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = next;
    }

    fn policy_of(&self, tool: &dyn DynTool) -> ToolPolicy {
        let settings = self
            .config
            .tools
            .get(tool.name())
            .cloned()
            .unwrap_or_else(|| self.config.defaults.clone());
        ToolPolicy {
            slots: Slots::new(settings.max_concurrency),
            retry: RetryPolicy::for_effect(tool.effect(), self.config.retry),
            resend: self.config.retry,
            metrics: ToolMetrics::new(tool.name()),
            settings,
        }
    }
}

/// A value built from a generation (a serialized tool list, say), rebuilt the first time it is
/// asked for after the generation changed.
pub(crate) struct Derived<T> {
    built: RwLock<Arc<(u64, T)>>,
    /// Built from the tools a principal's [`Reach`] keeps, one per reach asked for (the
    /// grants and keys configured say how many there can be; past [`MAX_VIEWS`] the oldest
    /// generation's are dropped first, then all).
    views: Mutex<HashMap<Reach, Arc<(u64, T)>>>,
    build: Box<dyn Fn(&ToolSet) -> T + Send + Sync>,
}

/// The most views of one derived value kept at once.
const MAX_VIEWS: usize = 64;

impl<T> Derived<T> {
    /// Builds from `generation` now, and from each later one with `build`.
    pub(crate) fn new(
        generation: &Generation,
        build: impl Fn(&ToolSet) -> T + Send + Sync + 'static,
    ) -> Self {
        Derived {
            built: RwLock::new(Arc::new((generation.number, build(&generation.tools)))),
            views: Mutex::new(HashMap::new()),
            build: Box::new(build),
        }
    }

    /// The value for `generation` as a principal reaching `reach` sees it: built from only the
    /// tools it reaches (the whole value when it reaches every one), once per generation.
    pub(crate) fn view(&self, generation: &Generation, reach: &Reach) -> Arc<(u64, T)> {
        if reach.is_all() {
            return self.get(generation);
        }
        let cached = self
            .views
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(reach)
            .filter(|view| view.0 == generation.number)
            .cloned();
        if let Some(view) = cached {
            return view;
        }
        let kept = generation.tools.only(|name| reach.allows(name));
        let fresh = Arc::new((generation.number, (self.build)(&kept)));
        let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        if views.len() >= MAX_VIEWS {
            views.retain(|_, view| view.0 == generation.number);
            if views.len() >= MAX_VIEWS {
                views.clear();
            }
        }
        views.insert(reach.clone(), fresh.clone());
        fresh
    }

    /// The value for `generation`. Two requests that find it stale at once may both build it;
    /// either result is right.
    pub(crate) fn get(&self, generation: &Generation) -> Arc<(u64, T)> {
        let built = self
            .built
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if built.0 == generation.number {
            return built;
        }
        let fresh = Arc::new((generation.number, (self.build)(&generation.tools)));
        let mut slot = self.built.write().unwrap_or_else(PoisonError::into_inner);
        // A build from a newer generation that landed meanwhile stays.
        if slot.0 < fresh.0 {
            *slot = fresh.clone();
        }
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::ctx::ToolCtx;
    use crate::contract::error::ToolError;
    use crate::contract::meta::Effect;
    use crate::contract::outcome::ToolOutcome;
    use serde_json::{Value, json};

    struct Named(String, Value, Effect);

    #[async_trait::async_trait]
    impl DynTool for Named {
        fn name(&self) -> &str {
            &self.0
        }
        fn description(&self) -> &str {
            ""
        }
        fn effect(&self) -> Effect {
            self.2
        }
        fn input_schema(&self) -> &Value {
            &self.1
        }
        fn output_schema(&self) -> Option<&Value> {
            None
        }
        fn idempotency_key(&self, _: &Value) -> Option<String> {
            None
        }
        async fn call_json(
            &self,
            _: &ToolCtx,
            input: Value,
        ) -> Result<ToolOutcome<Value>, ToolError> {
            Ok(ToolOutcome::Output(input))
        }
    }

    fn tool(name: &str) -> Arc<dyn DynTool> {
        Arc::new(Named(name.into(), json!({"type": "object"}), Effect::Read))
    }

    fn names(generation: &Generation) -> Vec<String> {
        generation.iter().map(|t| t.name().to_owned()).collect()
    }

    #[test]
    fn an_upstreams_tools_are_replaced_whole_and_a_taken_name_is_refused() {
        let mut natives = ToolSet::new();
        natives
            .register_dyn(Box::new(Named(
                "echo".into(),
                json!({"type": "object"}),
                Effect::Read,
            )))
            .unwrap();
        let live = Live::new(natives, &DispatchConfig::default());
        let first = live.current();
        assert_eq!(names(&first), ["echo"]);

        let refused = live.replace_source("files", vec![tool("files__a"), tool("files__b")]);
        assert!(refused.is_empty());
        let second = live.current();
        assert_eq!(names(&second), ["echo", "files__a", "files__b"]);
        assert!(second.number() > first.number());
        // A tool that stays keeps its policy (its slots, its metrics).
        let kept = second.entry("files__a").unwrap().policy;

        let refused = live.replace_source(
            "files",
            vec![tool("files__a"), tool("echo"), tool("bad name")],
        );
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(refused.contains(&RegistryError::DuplicateName {
            name: "echo".into()
        }));
        let third = live.current();
        assert_eq!(names(&third), ["echo", "files__a"]);
        assert!(Arc::ptr_eq(&kept, &third.entry("files__a").unwrap().policy));
        // The generation a call took still has what it had.
        assert_eq!(names(&second), ["echo", "files__a", "files__b"]);
        // A tool whose effect changes gets the retries of its new effect, and keeps its slots.
        let write: Arc<dyn DynTool> = Arc::new(Named(
            "files__a".into(),
            json!({"type": "object"}),
            Effect::Write,
        ));
        assert!(live.replace_source("files", vec![write]).is_empty());
        let changed = live.current().entry("files__a").unwrap().policy;
        assert_eq!(changed.retry.max_attempts, 1);
        assert!(Arc::ptr_eq(&kept.slots, &changed.slots));
        live.replace_source("files", vec![tool("files__a")]);

        // What is derived follows, built once per generation.
        let builds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = builds.clone();
        let derived = Derived::new(&third, move |tools: &ToolSet| {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tools
                .iter()
                .map(|t| t.name().to_owned())
                .collect::<Vec<_>>()
        });
        assert_eq!(derived.get(&third).1, ["echo", "files__a"]);
        assert_eq!(derived.get(&third).1, ["echo", "files__a"]);
        // A principal's view holds only the tools it reaches, built once per generation.
        let files = Reach::of(&["files__*".into()]).unwrap();
        assert_eq!(derived.view(&third, &files).1, ["files__a"]);
        assert_eq!(derived.view(&third, &files).1, ["files__a"]);
        assert_eq!(derived.view(&third, &Reach::all()).1, ["echo", "files__a"]);
        assert_eq!(builds.load(std::sync::atomic::Ordering::Relaxed), 2);
        live.replace_source("files", Vec::new());
        assert_eq!(derived.get(&live.current()).1, ["echo"]);
        assert!(derived.view(&live.current(), &files).1.is_empty());
        assert_eq!(builds.load(std::sync::atomic::Ordering::Relaxed), 4);
    }
}
