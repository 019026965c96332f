//! The object-safe face of a tool, so tools of different input and output types can share one
//! registry and one dispatch path.
//!
//! [`TypedTool`] adapts a [`ToolHandler`]: it builds the schemas once, deserializes the input
//! before the handler runs (so input that does not fit never reaches it), and serializes the
//! output. Tools whose identity is only known at run time (proxies of remote tools, say)
//! implement [`DynTool`] directly.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

use super::ctx::ToolCtx;
use super::error::{InputViolation, ToolError, Unavailable};
use super::meta::{Effect, ToolHandler};
use super::outcome::ToolOutcome;

/// A tool as the server sees it: JSON in, JSON out.
#[async_trait]
pub trait DynTool: Send + Sync {
    /// The name the tool is called by.
    fn name(&self) -> &str;
    /// What the tool does, for the model.
    fn description(&self) -> &str;
    /// What running the tool does to the world.
    fn effect(&self) -> Effect;
    /// The JSON Schema every input must match.
    fn input_schema(&self) -> &Value;
    /// The JSON Schema every output must match, when the tool declares one.
    fn output_schema(&self) -> Option<&Value>;
    /// The idempotency key the tool declares for `input`; `None` when it declares none or the
    /// input does not fit the tool.
    fn idempotency_key(&self, input: &Value) -> Option<String>;
    /// Checks what the input schema cannot say (a typed tool: that `input` deserializes into its
    /// input type, where `1.0` passes `"type": "integer"` but not `u64`). The server calls it
    /// after the schema check and before recording anything. `Ok` by default.
    fn check_input(&self, input: &Value) -> Result<(), Vec<InputViolation>> {
        let _ = input;
        Ok(())
    }
    /// [`DynTool::check_input`], then [`DynTool::idempotency_key`] of an input that passed: what
    /// the server asks of a tool once per call, after the schema check. A tool that can do both
    /// in one pass overrides it (a typed tool: one deserialization instead of two).
    fn admit(&self, input: &Value) -> Result<Option<String>, Vec<InputViolation>> {
        self.check_input(input)?;
        Ok(self.idempotency_key(input))
    }
    /// Whether the tool can run now: a tool proxied from a server that does not answer says so,
    /// and the call is refused before anything is recorded. `Ok` by default.
    fn ready(&self) -> Result<(), Unavailable> {
        Ok(())
    }
    /// The pin the tool is served under, when its definition comes from elsewhere and was
    /// trusted as it stood (an upstream tool: see `crate::upstream`). A pin that says the
    /// definition changed since holds the tool: every call of it is refused before anything is
    /// recorded. `None` by default (a tool of this process cannot change under its callers).
    fn pinned(&self) -> Option<&Pinned> {
        None
    }
    /// Whether the tool reads its call's attestation from its [`ToolCtx`] (an upstream's tool
    /// sends one on every call; a typed tool says so with `ToolHandler::ATTESTED`). The
    /// lifecycle gathers a call's facts only for such a tool. `false` by default.
    fn attested(&self) -> bool {
        false
    }
    /// Runs one attempt with a JSON input.
    async fn call_json(&self, ctx: &ToolCtx, input: Value)
    -> Result<ToolOutcome<Value>, ToolError>;

    /// Called when a call waits for a person's approval before its first attempt (its approval
    /// policy asked): a tool that needs something of the caller's that may not last until the
    /// approval (an upstream's credentials, exchanged for the caller's token) takes it now. An
    /// error ends the call at once, nobody asked. Nothing, by default.
    async fn before_approval(&self, _ctx: &ToolCtx) -> Result<(), ToolError> {
        Ok(())
    }

    /// A plain description of the tool, as served at `GET /tools`.
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            effect: self.effect(),
            input_schema: self.input_schema().clone(),
            output_schema: self.output_schema().cloned(),
        }
    }
}

/// A tool's public description: what a model needs to call it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct ToolDescriptor {
    /// The tool's name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// What running it does to the world.
    pub effect: Effect,
    /// The JSON Schema of its input.
    pub input_schema: Value,
    /// The JSON Schema of its output, or `null` when it declares none.
    pub output_schema: Option<Value>,
}

/// The definition a tool was trusted with, as a pin records it: what a call of it is made, and
/// approved, against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    /// The SHA-256 (hex) of the definition trusted.
    pub hash: String,
    /// When it was trusted (Unix ms): an approval of a call made before then is of another
    /// definition, and fails closed.
    pub since_ms: i64,
    /// The hash of the definition its source lists now, when that is not the one trusted: the
    /// tool is held until an admin accepts the change.
    pub changed_to: Option<String>,
}

impl Pinned {
    /// Whether the tool is held: its definition changed since it was trusted.
    pub fn is_held(&self) -> bool {
        self.changed_to.is_some()
    }
}

/// Adapts a typed [`ToolHandler`] to [`DynTool`].
pub struct TypedTool<H> {
    handler: H,
    input_schema: Value,
    output_schema: Option<Value>,
}

impl<H: ToolHandler> TypedTool<H> {
    /// Wraps `handler`, generating its schemas once.
    pub fn new(handler: H) -> Self {
        TypedTool {
            handler,
            input_schema: H::input_schema(),
            output_schema: H::output_schema(),
        }
    }

    /// The wrapped handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }
}

#[async_trait]
impl<H: ToolHandler + 'static> DynTool for TypedTool<H> {
    fn name(&self) -> &str {
        H::NAME
    }

    fn description(&self) -> &str {
        H::DESCRIPTION
    }

    fn effect(&self) -> Effect {
        H::EFFECT
    }

    fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    fn output_schema(&self) -> Option<&Value> {
        self.output_schema.as_ref()
    }

    fn idempotency_key(&self, input: &Value) -> Option<String> {
        let input = H::Input::deserialize(input).ok()?;
        self.handler.idempotency_key(&input)
    }

    fn check_input(&self, input: &Value) -> Result<(), Vec<InputViolation>> {
        typed_input::<H::Input>(input).map(drop)
    }

    fn admit(&self, input: &Value) -> Result<Option<String>, Vec<InputViolation>> {
        typed_input::<H::Input>(input).map(|typed| self.handler.idempotency_key(&typed))
    }

    fn attested(&self) -> bool {
        H::ATTESTED
    }

    async fn call_json(
        &self,
        ctx: &ToolCtx,
        input: Value,
    ) -> Result<ToolOutcome<Value>, ToolError> {
        // Dispatch has run `check_input` (which points at the part that does not fit) before
        // this; here the input is taken apart without tracking the path, which every call would
        // pay for.
        let input = H::Input::deserialize(input).map_err(|err| ToolError::InvalidInput {
            tool: H::NAME.to_owned(),
            violations: vec![InputViolation {
                path: String::new(),
                message: err.to_string(),
            }],
        })?;
        let outcome = self
            .handler
            .call(ctx, input)
            .await
            .map_err(|source| ToolError::Handler {
                tool: H::NAME.to_owned(),
                source,
            })?;
        match outcome {
            ToolOutcome::Output(output) => serde_json::to_value(output)
                .map(ToolOutcome::Output)
                .map_err(|source| ToolError::OutputSerialization {
                    tool: H::NAME.to_owned(),
                    source,
                }),
            ToolOutcome::Suspend(suspension) => Ok(ToolOutcome::Suspend(suspension)),
        }
    }
}

/// `input` as the typed input `T`, or why it does not fit. The plain deserializer first:
/// tracking the path costs on every call, and only an input that does not fit needs it, for the
/// violation's pointer.
fn typed_input<T: serde::de::DeserializeOwned>(input: &Value) -> Result<T, Vec<InputViolation>> {
    T::deserialize(input).or_else(|_| {
        serde_path_to_error::deserialize::<_, T>(input)
            .map_err(|err| vec![deserialize_violation(err)])
    })
}

/// A deserialization error as a violation at a JSON Pointer.
fn deserialize_violation(err: serde_path_to_error::Error<serde_json::Error>) -> InputViolation {
    let mut path = String::new();
    for segment in err.path().iter() {
        path.push('/');
        match segment {
            serde_path_to_error::Segment::Seq { index } => path.push_str(&index.to_string()),
            serde_path_to_error::Segment::Map { key } => {
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
            }
            serde_path_to_error::Segment::Enum { variant } => path.push_str(variant),
            serde_path_to_error::Segment::Unknown => path.push('?'),
        }
    }
    InputViolation {
        path,
        message: err.into_inner().to_string(),
    }
}
