//! The tool contract without a server: the derive's defaults, the registry's rules, and the
//! erased layer's promise that input which does not fit never reaches a handler.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::json;
use toolgate::schemars::{self, JsonSchema};
use toolgate::{
    DynTool, Effect, HandlerError, RegistryError, Tool, ToolCtx, ToolError, ToolHandler, ToolMeta,
    ToolOutcome, ToolSet, TypedTool,
};

/// Pays an approved insurance claim.
///
/// Only claims already approved by an adjuster.
#[derive(Tool)]
#[tool(effect = "write")]
struct PayClaim {
    runs: Arc<AtomicUsize>,
}

/// Ignored: the attribute's description wins.
#[derive(Tool)]
#[tool(
    name = "lookup-v2",
    description = "Looks things up.",
    effect = "idempotent"
)]
struct Lookup;

#[derive(Tool)]
#[tool(description = "Fetches a URL.", effect = "read")]
struct HTTPFetch;

#[derive(Deserialize, JsonSchema)]
struct Claim {
    claim_id: String,
    cents: u64,
}

#[derive(Serialize, JsonSchema)]
struct Paid {
    payment_id: String,
}

#[toolgate::async_trait]
impl ToolHandler for PayClaim {
    type Input = Claim;
    type Output = Paid;

    async fn call(&self, ctx: &ToolCtx, input: Claim) -> Result<ToolOutcome<Paid>, HandlerError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if input.cents == 0 {
            return Err(HandlerError::new(std::io::Error::other("nothing to pay")));
        }
        Ok(ToolOutcome::output(Paid {
            payment_id: format!("{}:{}", ctx.idempotency_key().unwrap_or("-"), input.cents),
        }))
    }

    fn output_schema() -> Option<serde_json::Value> {
        Some(serde_json::to_value(schemars::schema_for!(Paid)).unwrap())
    }

    fn idempotency_key(&self, input: &Claim) -> Option<String> {
        Some(format!("pay_claim:{}", input.claim_id))
    }
}

#[toolgate::async_trait]
impl ToolHandler for Lookup {
    type Input = Claim;
    type Output = ();

    async fn call(&self, _ctx: &ToolCtx, _input: Claim) -> Result<ToolOutcome<()>, HandlerError> {
        Ok(ToolOutcome::output(()))
    }
}

fn pay_claim() -> (PayClaim, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    (PayClaim { runs: runs.clone() }, runs)
}

#[test]
fn derive_defaults_to_snake_case_name_and_doc_comment() {
    assert_eq!(PayClaim::NAME, "pay_claim");
    assert_eq!(
        PayClaim::DESCRIPTION,
        "Pays an approved insurance claim.\n\nOnly claims already approved by an adjuster."
    );
    assert_eq!(PayClaim::EFFECT, Effect::Write);
    assert_eq!(HTTPFetch::NAME, "http_fetch");
    assert_eq!(HTTPFetch::EFFECT, Effect::Read);
}

#[test]
fn derive_attribute_overrides_the_defaults() {
    assert_eq!(Lookup::NAME, "lookup-v2");
    assert_eq!(Lookup::DESCRIPTION, "Looks things up.");
    assert_eq!(Lookup::EFFECT, Effect::Idempotent);
}

#[test]
fn effect_serializes_lowercase() {
    assert_eq!(
        serde_json::to_value([Effect::Read, Effect::Idempotent, Effect::Write]).unwrap(),
        json!(["read", "idempotent", "write"])
    );
}

#[test]
fn schemas_come_from_the_types_and_output_is_opt_in() {
    let input = <PayClaim as ToolHandler>::input_schema();
    assert_eq!(input["type"], "object");
    assert_eq!(input["required"], json!(["claim_id", "cents"]));
    let output = <PayClaim as ToolHandler>::output_schema().unwrap();
    assert_eq!(output["required"], json!(["payment_id"]));
    assert_eq!(<Lookup as ToolHandler>::output_schema(), None);

    let tool = TypedTool::new(pay_claim().0);
    let descriptor = tool.descriptor();
    assert_eq!(descriptor.name, "pay_claim");
    assert_eq!(descriptor.effect, Effect::Write);
    assert_eq!(descriptor.input_schema, input);
    assert_eq!(descriptor.output_schema, Some(output));
}

#[tokio::test]
async fn typed_tool_never_runs_the_handler_on_input_that_does_not_fit() {
    let (handler, runs) = pay_claim();
    let tool = TypedTool::new(handler);
    let ctx = ToolCtx::default();
    for bad in [
        json!({"claim_id": 1, "cents": 5}),
        json!({}),
        json!("x"),
        json!(null),
    ] {
        match tool.call_json(&ctx, bad.clone()).await {
            Err(ToolError::InvalidInput { tool, violations }) => {
                assert_eq!(tool, "pay_claim");
                assert!(!violations.is_empty());
            }
            other => panic!("{bad}: expected InvalidInput, got {other:?}"),
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    let ctx = ToolCtx::new("call_1").with_idempotency_key(Some("pay_claim:c9"));
    let outcome = tool
        .call_json(&ctx, json!({"claim_id": "c9", "cents": 12}))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        ToolOutcome::Output(json!({"payment_id": "pay_claim:c9:12"}))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    match tool
        .call_json(&ctx, json!({"claim_id": "c9", "cents": 0}))
        .await
    {
        Err(ToolError::Handler { tool, source }) => {
            assert_eq!(tool, "pay_claim");
            assert_eq!(source.to_string(), "nothing to pay");
            assert!(
                std::error::Error::source(&source).is_some(),
                "the cause is kept"
            );
        }
        other => panic!("expected a handler error, got {other:?}"),
    }
}

#[test]
fn the_idempotency_key_comes_from_the_typed_input() {
    let tool = TypedTool::new(pay_claim().0);
    let input = json!({"claim_id": "c-17", "cents": 100});
    assert_eq!(tool.idempotency_key(&input), Some("pay_claim:c-17".into()));
    assert_eq!(
        tool.idempotency_key(&input),
        tool.idempotency_key(&input.clone())
    );
    assert_eq!(
        tool.idempotency_key(&json!({"claim_id": 5})),
        None,
        "input that does not fit"
    );
    assert_eq!(
        TypedTool::new(Lookup).idempotency_key(&input),
        None,
        "none declared"
    );
}

#[test]
fn admitting_an_input_checks_it_and_derives_its_key_in_one_step() {
    let (handler, runs) = pay_claim();
    let tool = TypedTool::new(handler);
    let input = json!({"claim_id": "c-17", "cents": 100});
    assert_eq!(tool.admit(&input), Ok(Some("pay_claim:c-17".into())));
    assert_eq!(TypedTool::new(Lookup).admit(&input), Ok(None));
    // Input that does not fit is refused with a pointer at the part that does not, as
    // `check_input` refuses it.
    let bad = json!({"claim_id": "c-17", "cents": "a lot"});
    let violations = tool.admit(&bad).unwrap_err();
    assert_eq!(violations, tool.check_input(&bad).unwrap_err());
    assert_eq!(violations[0].path, "/cents");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "admitting never runs the tool"
    );
}

#[test]
fn ctx_builds_for_unit_tests() {
    let ctx = ToolCtx::default();
    assert_eq!(ctx.call_id(), "");
    assert_eq!(ctx.attempt(), 1);
    assert_eq!(ctx.idempotency_key(), None);
    assert_eq!(ctx.resume(), None);
    let ctx = ToolCtx::new("call_x")
        .with_attempt(3)
        .with_idempotency_key(Some("k"))
        .with_resume(json!({"answer": "yes"}));
    assert_eq!(
        (ctx.call_id(), ctx.attempt(), ctx.idempotency_key()),
        ("call_x", 3, Some("k"))
    );
    assert_eq!(ctx.resume(), Some(&json!({"answer": "yes"})));
}

#[test]
fn handler_errors_display_their_message() {
    assert_eq!(
        HandlerError::message("card declined").to_string(),
        "card declined"
    );
    let wrapped = HandlerError::new(std::io::Error::other("disk full"));
    assert_eq!(wrapped.to_string(), "disk full");
}

#[test]
fn registry_refuses_duplicate_names() {
    let mut tools = ToolSet::new();
    tools.register(pay_claim().0).unwrap();
    let err = tools.register(pay_claim().0).unwrap_err();
    assert_eq!(
        err,
        RegistryError::DuplicateName {
            name: "pay_claim".into()
        }
    );
    assert_eq!(tools.len(), 1);
}

/// A run-time tool whose name and input schema are whatever it is given.
struct Named {
    name: String,
    schema: serde_json::Value,
}

impl Named {
    /// A tool named `name` that takes any input.
    fn any(name: &str) -> Self {
        Named {
            name: name.to_owned(),
            schema: serde_json::Value::Bool(true),
        }
    }
}

#[toolgate::async_trait]
impl DynTool for Named {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "named"
    }
    fn effect(&self) -> Effect {
        Effect::Read
    }
    fn input_schema(&self) -> &serde_json::Value {
        &self.schema
    }
    fn output_schema(&self) -> Option<&serde_json::Value> {
        None
    }
    fn idempotency_key(&self, _input: &serde_json::Value) -> Option<String> {
        None
    }
    async fn call_json(
        &self,
        _ctx: &ToolCtx,
        input: serde_json::Value,
    ) -> Result<ToolOutcome<serde_json::Value>, ToolError> {
        Ok(ToolOutcome::output(input))
    }
}

#[test]
fn registry_refuses_names_providers_would_refuse() {
    let mut tools = ToolSet::new();
    let too_long = "x".repeat(65);
    for bad in [
        "",
        "has space",
        "dot.ted",
        "slash/ed",
        "ünï",
        too_long.as_str(),
    ] {
        let err = tools.register_dyn(Box::new(Named::any(bad))).unwrap_err();
        assert_eq!(
            err,
            RegistryError::InvalidName { name: bad.into() },
            "{bad:?}"
        );
    }
    assert!(tools.is_empty());
    let longest = "y".repeat(64);
    for good in ["a", "A-b_9", longest.as_str()] {
        tools.register_dyn(Box::new(Named::any(good))).unwrap();
    }
    assert_eq!(tools.len(), 3);
}

#[test]
fn registry_refuses_the_name_the_mcp_door_keeps() {
    let mut tools = ToolSet::new();
    let err = tools
        .register_dyn(Box::new(Named::any("toolgate_await_call")))
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        err,
        RegistryError::ReservedName {
            name: toolgate::AWAIT_CALL_TOOL.into()
        }
    );
    assert!(err.to_string().contains("reserved"), "{err}");
    assert!(tools.is_empty());
    // Only that name: one like it is a tool like any other.
    tools
        .register_dyn(Box::new(Named::any("toolgate_await_calls")))
        .unwrap();
}

#[test]
fn registry_refuses_a_schema_that_does_not_compile() {
    let bad = Named {
        name: "bad_schema".into(),
        schema: json!({"type": "no-such-type"}),
    };
    let err = ToolSet::new()
        .register_dyn(Box::new(bad))
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, RegistryError::InvalidSchema { ref name, .. } if name == "bad_schema"));
}

#[test]
fn registry_iterates_and_describes_in_name_order() {
    let mut tools = ToolSet::new();
    for name in ["zeta", "alpha", "Mid", "beta"] {
        tools.register_dyn(Box::new(Named::any(name))).unwrap();
    }
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["Mid", "alpha", "beta", "zeta"]);
    let described: Vec<String> = tools.descriptors().into_iter().map(|d| d.name).collect();
    assert_eq!(described, names);
    assert_eq!(tools.get("beta").map(|t| t.name()), Some("beta"));
    assert!(tools.get("gamma").is_none());
    let looped: Vec<&str> = (&tools).into_iter().map(|t| t.name()).collect();
    assert_eq!(looped, names);
}

#[test]
fn the_derive_compiles_or_fails_with_errors_at_the_attribute() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass_*.rs");
    cases.compile_fail("tests/ui/fail_*.rs");
}
