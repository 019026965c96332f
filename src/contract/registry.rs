//! `ToolSet`: the tools a server serves, keyed by name.
//!
//! Registration is where a tool is checked once, so dispatch never has to: its name must be one
//! LLM providers accept, no two tools may share a name, no tool may take the name the MCP door
//! keeps for itself, and its input schema must compile, since every call is validated against
//! it before the handler runs. It is also where the tool's [`NullPlan`] is worked out: which
//! `null`s in an input stand for a property left out.

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::erased::{DynTool, ToolDescriptor, TypedTool};
use super::error::InputViolation;
use super::meta::ToolHandler;
use super::nulls::NullPlan;

/// The name of the MCP door's own tool, which waits for a suspended call's outcome; no
/// registered tool may take it.
pub const AWAIT_CALL_TOOL: &str = "toolgate_await_call";

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Another tool already has this name.
    #[error("a tool named `{name}` is already registered")]
    DuplicateName {
        /// The name registered twice.
        name: String,
    },
    /// The name does not match `^[a-zA-Z0-9_-]{1,64}$`.
    #[error("invalid tool name `{name}`: names must match ^[a-zA-Z0-9_-]{{1,64}}$")]
    InvalidName {
        /// The rejected name.
        name: String,
    },
    /// The name is [`AWAIT_CALL_TOOL`], which the MCP door keeps for its own tool.
    #[error(
        "the tool name `{name}` is reserved: the MCP door serves its own tool by that name \
         (it waits for a suspended call's outcome)"
    )]
    ReservedName {
        /// The reserved name.
        name: String,
    },
    /// The tool's input or output schema is not a JSON Schema a validator can compile.
    #[error("tool `{name}` has a schema that does not compile: {message}")]
    InvalidSchema {
        /// The tool's name.
        name: String,
        /// The validator's complaint.
        message: String,
    },
}

/// Whether `name` is a tool name LLM providers accept: `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `name` matches `glob`, where `*` is any run of characters and `?` any one.
pub fn glob_matches(glob: &str, name: &str) -> bool {
    let (glob, name): (Vec<char>, Vec<char>) = (glob.chars().collect(), name.chars().collect());
    // The last `*` seen and where in `name` it began to match; on a mismatch it takes one more.
    let (mut g, mut n, mut star) = (0, 0, None::<(usize, usize)>);
    while n < name.len() {
        match glob.get(g) {
            Some('*') => {
                star = Some((g, n));
                g += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                g += 1;
                n += 1;
            }
            _ => match star {
                Some((sg, sn)) => {
                    g = sg + 1;
                    n = sn + 1;
                    star = Some((sg, sn + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == '*')
}

/// The most violations reported for one input; past this the list is cut.
const MAX_VIOLATIONS: usize = 32;

/// A registered tool with its validators, compiled once. Shared between the generations of a
/// live tool set (see [`ToolSet::with_source`]), so a tool is checked once however often the
/// tools beside it change.
pub(crate) struct Registered {
    pub(crate) tool: Arc<dyn DynTool>,
    /// The upstream server the tool is proxied from; `None` for a tool registered in code.
    source: Option<Arc<str>>,
    input: jsonschema::Validator,
    output: Option<jsonschema::Validator>,
    /// Where a `null` in an input means "absent"; `None` for most tools, where it never does.
    nulls: Option<NullPlan>,
    /// Whether the tool is held (its pin says its definition changed): read once, here, so a
    /// call pays a field read for it, not a call into the tool.
    held: bool,
}

impl Registered {
    /// Whether the tool is held: every call of it is refused (see `DynTool::pinned`).
    pub(crate) fn held(&self) -> bool {
        self.held
    }

    /// Reads each `null` that stands for a property left out as left out (see
    /// [`super::nulls`]), checks `input` against the tool's input schema, then whatever the
    /// tool checks itself, and answers the idempotency key the tool declares for it, if any.
    /// `input` stays as normalized: that is the input that is keyed, recorded and run.
    pub(crate) fn admit(&self, input: &mut Value) -> Result<Option<String>, Vec<InputViolation>> {
        if let Some(nulls) = &self.nulls {
            nulls.apply(input);
        }
        violations(&self.input, input)?;
        self.tool.admit(input)
    }

    /// Whether the tool declares an output schema.
    pub(crate) fn has_output_schema(&self) -> bool {
        self.output.is_some()
    }

    /// Checks `output` against the tool's output schema, when it declares one.
    pub(crate) fn check_output(&self, output: &Value) -> Result<(), Vec<InputViolation>> {
        match &self.output {
            Some(validator) => violations(validator, output),
            None => Ok(()),
        }
    }
}

impl Registered {
    /// Checks `tool` once, for any set: its name, and that its schemas compile.
    fn check(
        tool: Arc<dyn DynTool>,
        source: Option<Arc<str>>,
    ) -> Result<Registered, RegistryError> {
        let name = tool.name().to_owned();
        if !is_valid_tool_name(&name) {
            return Err(RegistryError::InvalidName { name });
        }
        if name == AWAIT_CALL_TOOL {
            return Err(RegistryError::ReservedName { name });
        }
        let invalid = |message| RegistryError::InvalidSchema {
            name: name.clone(),
            message,
        };
        let input = compile_schema(tool.input_schema()).map_err(invalid)?;
        let output = tool
            .output_schema()
            .map(compile_schema)
            .transpose()
            .map_err(invalid)?;
        let nulls = NullPlan::for_schema(tool.input_schema());
        let held = tool.pinned().is_some_and(super::erased::Pinned::is_held);
        Ok(Registered {
            tool,
            source,
            input,
            output,
            nulls,
            held,
        })
    }
}

/// Every way `instance` fails `validator`, capped at a readable number. Messages name the
/// offending value only by its path, so a huge input is never echoed back.
pub(crate) fn violations(
    validator: &jsonschema::Validator,
    instance: &Value,
) -> Result<(), Vec<InputViolation>> {
    if validator.is_valid(instance) {
        return Ok(());
    }
    Err(validator
        .iter_errors(instance)
        .take(MAX_VIOLATIONS)
        .map(|err| InputViolation {
            path: err.instance_path().as_str().to_owned(),
            message: err.masked().to_string(),
        })
        .collect())
}

/// Compiles a JSON Schema for validation, resolving only references inside the schema itself.
pub(crate) fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::validator_for(schema).map_err(|err| err.to_string())
}

/// The name-keyed set of tools a server dispatches to. Iterates in name order. Cloning is cheap:
/// the tools are shared.
#[derive(Default, Clone)]
pub struct ToolSet {
    tools: BTreeMap<String, Arc<Registered>>,
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> Self {
        ToolSet::default()
    }

    /// Registers a typed handler.
    pub fn register<H: ToolHandler + 'static>(
        &mut self,
        handler: H,
    ) -> Result<&mut Self, RegistryError> {
        self.register_dyn(Box::new(TypedTool::new(handler)))
    }

    /// Registers a tool that implements [`DynTool`] directly.
    pub fn register_dyn(&mut self, tool: Box<dyn DynTool>) -> Result<&mut Self, RegistryError> {
        let registered = Registered::check(Arc::from(tool), None)?;
        if self.tools.contains_key(registered.tool.name()) {
            return Err(RegistryError::DuplicateName {
                name: registered.tool.name().to_owned(),
            });
        }
        self.tools
            .insert(registered.tool.name().to_owned(), Arc::new(registered));
        Ok(self)
    }

    /// This set with the tools of the upstream `source` replaced by `tools`: those it had
    /// before are gone, and each of `tools` that can be registered is added. Each that cannot
    /// (a bad name or schema, or a name another tool has) is left out and its error returned.
    pub(crate) fn with_source(
        &self,
        source: &str,
        tools: Vec<Arc<dyn DynTool>>,
    ) -> (ToolSet, Vec<RegistryError>) {
        let mut next = self.clone();
        next.tools
            .retain(|_, registered| registered.source.as_deref() != Some(source));
        let mut errors = Vec::new();
        for tool in tools {
            match Registered::check(tool, Some(source.into())) {
                Ok(registered) if next.tools.contains_key(registered.tool.name()) => {
                    errors.push(RegistryError::DuplicateName {
                        name: registered.tool.name().to_owned(),
                    });
                }
                Ok(registered) => {
                    next.tools
                        .insert(registered.tool.name().to_owned(), Arc::new(registered));
                }
                Err(err) => errors.push(err),
            }
        }
        (next, errors)
    }

    /// The tools whose names `keep` says to keep (shared, not copied).
    pub(crate) fn only(&self, keep: impl Fn(&str) -> bool) -> ToolSet {
        ToolSet {
            tools: self
                .tools
                .iter()
                .filter(|(name, _)| keep(name))
                .map(|(name, tool)| (name.clone(), tool.clone()))
                .collect(),
        }
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&dyn DynTool> {
        self.tools.get(name).map(|r| r.tool.as_ref())
    }

    pub(crate) fn lookup(&self, name: &str) -> Option<&Registered> {
        self.tools.get(name).map(Arc::as_ref)
    }

    /// The registered tool `name`, shared.
    pub(crate) fn lookup_shared(&self, name: &str) -> Option<&Arc<Registered>> {
        self.tools.get(name)
    }

    /// The descriptors of every tool, in name order.
    pub fn descriptors(&self) -> Vec<ToolDescriptor> {
        self.iter().map(|tool| tool.descriptor()).collect()
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The tools in name order.
    pub fn iter(&self) -> impl Iterator<Item = &dyn DynTool> {
        self.tools.values().map(|r| r.tool.as_ref())
    }
}

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl<'a> IntoIterator for &'a ToolSet {
    type Item = &'a dyn DynTool;
    type IntoIter = Box<dyn Iterator<Item = &'a dyn DynTool> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}
