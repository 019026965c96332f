//! Approval conditions: the CEL expressions of an approval policy (`when`, and the `reason`
//! the approver reads), compiled once at start and evaluated over one call at admission.
//!
//! An expression sees three variables: `input` (the call's validated input), `tool` (`name`,
//! `effect`) and `principal` (`name`, `role`, and `claims`: a token's claims, empty for an API
//! key). Anything else it names is refused when it is compiled, and so is a field of `input`
//! that the tool's input schema cannot have ([`Expression::check_input_fields`]), so that a typo
//! stops the start instead of asking a person about every call. What only the call can tell (a
//! field left out, a value of another type) fails at run time, and a policy fails closed: the
//! call suspends, and the reason says why.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::objects::Key;
use serde_json::Value;

use super::who::{Principal, Role};
use crate::contract::meta::Effect;

/// The variables an expression may name.
const VARIABLES: [&str; 3] = ["input", "tool", "principal"];

/// Identifiers CEL reads as type names (`type(x) == int`), not variables.
const TYPE_NAMES: [&str; 10] = [
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
];

/// The longest expression source accepted, in bytes: the parser's work is bounded by it.
const MAX_SOURCE_BYTES: usize = 4096;

/// A compiled CEL expression of an approval policy. Cheap to clone.
#[derive(Clone)]
pub struct Expression {
    source: Arc<str>,
    program: Arc<cel::Program>,
    /// Which of the variables it names, so an evaluation converts only those.
    uses: [bool; 3],
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Expression").field(&self.source).finish()
    }
}

impl PartialEq for Expression {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Expression {
    /// Compiles `source`: it must parse, and name no variable but `input`, `tool` and
    /// `principal` (and those its own macros bind, such as `x` in `input.items.all(x, …)`).
    pub fn compile(source: &str) -> Result<Expression, String> {
        if source.trim().is_empty() {
            return Err("is empty: leave it out instead".into());
        }
        if source.len() > MAX_SOURCE_BYTES {
            return Err(format!("is longer than {MAX_SOURCE_BYTES} bytes"));
        }
        let program =
            cel::Program::compile(source).map_err(|e| format!("is not a CEL expression: {e}"))?;
        let mut names = Names::default();
        names.walk(program.expression(), &mut Vec::new());
        if let Some(unknown) = names.unknown.first() {
            return Err(format!(
                "names `{unknown}`, which is not a variable: an expression sees `input`, \
                 `tool` and `principal`"
            ));
        }
        let uses = VARIABLES.map(|name| names.used.iter().any(|used| used == name));
        Ok(Expression {
            source: source.into(),
            program: Arc::new(program),
            uses,
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Refuses a field of `input` that the tool's `input_schema` cannot have: a property it
    /// does not list where it allows no others (`additionalProperties: false`), or a field of a
    /// value that is not an object. Where the schema allows more, or says too little to tell
    /// (`anyOf`, a `$ref` outside the document), nothing is refused.
    pub fn check_input_fields(&self, input_schema: &Value) -> Result<(), String> {
        let mut paths = Vec::new();
        input_paths(self.program.expression(), &mut paths);
        for path in paths {
            let mut schema = input_schema;
            for (depth, field) in path.iter().enumerate() {
                schema = resolve(input_schema, schema);
                let at = || format!("input.{}", path[..=depth].join("."));
                if let Some(kind) = schema.get("type").and_then(Value::as_str)
                    && kind != "object"
                {
                    return Err(format!(
                        "names `{}`, but `{}` is a {kind} in the tool's input schema",
                        at(),
                        if depth == 0 {
                            "input".to_owned()
                        } else {
                            format!("input.{}", path[..depth].join("."))
                        }
                    ));
                }
                if let Some(property) = schema
                    .get("properties")
                    .and_then(|properties| properties.get(field))
                {
                    schema = property;
                    continue;
                }
                let complex = ["anyOf", "oneOf", "allOf", "$ref", "patternProperties"]
                    .iter()
                    .any(|key| schema.get(key).is_some());
                match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) if !complex => {
                        return Err(format!(
                            "names `{}`, a field the tool's input schema does not have",
                            at()
                        ));
                    }
                    Some(more @ Value::Object(_)) if !complex => schema = more,
                    _ => break,
                }
            }
        }
        Ok(())
    }

    /// Evaluates the expression over one call.
    pub(super) fn evaluate(&self, scope: &Scope<'_>) -> Result<cel::Value, String> {
        let mut context = cel::Context::with_env(standard_library());
        if self.uses[0] {
            context.add_variable_from_value("input", to_cel(scope.input));
        }
        if self.uses[1] {
            context.add_variable_from_value("tool", scope.tool());
        }
        if self.uses[2] {
            context.add_variable_from_value("principal", scope.principal());
        }
        self.program.execute(&context).map_err(|e| e.to_string())
    }
}

/// CEL's standard functions, built once: `Context::default()` builds them anew each time, which
/// cost about four times an echo call's instructions per evaluation.
fn standard_library() -> Arc<cel::Env> {
    static STANDARD: OnceLock<Arc<cel::Env>> = OnceLock::new();
    STANDARD
        .get_or_init(|| Arc::new(cel::Env::stdlib()))
        .clone()
}

/// What an expression is evaluated over: one call.
pub(super) struct Scope<'a> {
    pub(super) input: &'a Value,
    pub(super) tool: &'a str,
    pub(super) effect: Effect,
    pub(super) principal: &'a Principal,
}

impl Scope<'_> {
    fn tool(&self) -> cel::Value {
        let effect = match self.effect {
            Effect::Read => "read",
            Effect::Idempotent => "idempotent",
            Effect::Write => "write",
        };
        cel_map([
            ("name", cel::Value::from(self.tool)),
            ("effect", cel::Value::from(effect)),
        ])
    }

    fn principal(&self) -> cel::Value {
        let principal = self.principal;
        let role = match principal.role {
            Role::Caller => "caller",
            Role::Approver => "approver",
            Role::Admin => "admin",
        };
        let claims = match &principal.claims {
            Some(claims) => to_cel_map(claims),
            None => cel::Value::Map(HashMap::<Key, cel::Value>::new().into()),
        };
        cel_map([
            (
                "name",
                principal.name.as_deref().map(cel::Value::from).into(),
            ),
            ("role", cel::Value::from(role)),
            ("claims", claims),
        ])
    }
}

fn cel_map<const N: usize>(entries: [(&str, cel::Value); N]) -> cel::Value {
    let map: HashMap<Key, cel::Value> = entries
        .into_iter()
        .map(|(key, value)| (Key::from(key), value))
        .collect();
    cel::Value::Map(map.into())
}

/// JSON as CEL sees it: an integer is an `int` when it fits one (so `input.n > 100` compares
/// like with like), else a `uint`; any other number a `double`.
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => to_cel_map(map),
    }
}

fn to_cel_map(map: &serde_json::Map<String, Value>) -> cel::Value {
    let map: HashMap<Key, cel::Value> = map
        .iter()
        .map(|(key, value)| (Key::from(key.as_str()), to_cel(value)))
        .collect();
    cel::Value::Map(map.into())
}

/// The identifiers an expression names, told apart from those its macros bind.
#[derive(Default)]
struct Names {
    used: Vec<String>,
    unknown: Vec<String>,
}

impl Names {
    fn walk(&mut self, expr: &IdedExpr, bound: &mut Vec<String>) {
        match &expr.expr {
            Expr::Ident(name) => {
                if bound.iter().any(|b| b == name) || TYPE_NAMES.contains(&name.as_str()) {
                    return;
                }
                if VARIABLES.contains(&name.as_str()) {
                    if !self.used.contains(name) {
                        self.used.push(name.clone());
                    }
                } else {
                    self.unknown.push(name.clone());
                }
            }
            Expr::Select(select) => self.walk(&select.operand, bound),
            Expr::Call(call) => {
                if let Some(target) = &call.target {
                    self.walk(target, bound);
                }
                for arg in &call.args {
                    self.walk(arg, bound);
                }
            }
            Expr::List(list) => {
                for element in &list.elements {
                    self.walk(element, bound);
                }
            }
            Expr::Map(map) => {
                for entry in &map.entries {
                    self.entry(&entry.expr, bound);
                }
            }
            Expr::Struct(structure) => {
                for entry in &structure.entries {
                    self.entry(&entry.expr, bound);
                }
            }
            Expr::Comprehension(comprehension) => {
                self.walk(&comprehension.iter_range, bound);
                self.walk(&comprehension.accu_init, bound);
                let before = bound.len();
                bound.push(comprehension.iter_var.clone());
                if let Some(second) = &comprehension.iter_var2 {
                    bound.push(second.clone());
                }
                bound.push(comprehension.accu_var.clone());
                self.walk(&comprehension.loop_cond, bound);
                self.walk(&comprehension.loop_step, bound);
                self.walk(&comprehension.result, bound);
                bound.truncate(before);
            }
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }

    fn entry(&mut self, entry: &EntryExpr, bound: &mut Vec<String>) {
        match entry {
            EntryExpr::MapEntry(entry) => {
                self.walk(&entry.key, bound);
                self.walk(&entry.value, bound);
            }
            EntryExpr::StructField(field) => self.walk(&field.value, bound),
        }
    }
}

/// Every chain of field selections on `input` (`input.a.b` is `["a", "b"]`), `has()`'s included.
/// (A macro that binds `input` to something else is not told apart: such an expression is odd
/// enough that a refusal of it is a fair question to ask.)
fn input_paths(expr: &IdedExpr, paths: &mut Vec<Vec<String>>) {
    if let Some(path) = selection_on_input(expr) {
        if !path.is_empty() {
            paths.push(path);
        }
        return;
    }
    match &expr.expr {
        Expr::Select(select) => input_paths(&select.operand, paths),
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                input_paths(target, paths);
            }
            for arg in &call.args {
                input_paths(arg, paths);
            }
        }
        Expr::List(list) => list.elements.iter().for_each(|e| input_paths(e, paths)),
        Expr::Map(map) => {
            for entry in &map.entries {
                if let EntryExpr::MapEntry(entry) = &entry.expr {
                    input_paths(&entry.key, paths);
                    input_paths(&entry.value, paths);
                }
            }
        }
        Expr::Struct(structure) => {
            for entry in &structure.entries {
                if let EntryExpr::StructField(field) = &entry.expr {
                    input_paths(&field.value, paths);
                }
            }
        }
        Expr::Comprehension(c) => {
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                input_paths(part, paths);
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// `input.a.b` as `["a", "b"]`, `input` alone as `[]`; `None` for anything else.
fn selection_on_input(expr: &IdedExpr) -> Option<Vec<String>> {
    match &expr.expr {
        Expr::Ident(name) if name == "input" => Some(Vec::new()),
        Expr::Select(select) => {
            let mut path = selection_on_input(&select.operand)?;
            path.push(select.field.clone());
            Some(path)
        }
        _ => None,
    }
}

/// `schema` with a local `$ref` (`#/$defs/X`, `#/definitions/X`) followed, as far as `root`
/// holds it.
fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let mut schema = schema;
    for _ in 0..16 {
        let Some(target) = schema.get("$ref").and_then(Value::as_str) else {
            break;
        };
        let Some(found) = target
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
        else {
            break;
        };
        schema = found;
    }
    schema
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn scope_with<'a>(input: &'a Value, principal: &'a Principal) -> Scope<'a> {
        Scope {
            input,
            tool: "issue_refund",
            effect: Effect::Write,
            principal,
        }
    }

    fn eval(source: &str, input: Value) -> Result<cel::Value, String> {
        let principal = Principal::new(Some("agent".into()), Role::Caller);
        Expression::compile(source)
            .unwrap()
            .evaluate(&scope_with(&input, &principal))
    }

    #[test]
    fn an_expression_sees_the_input_the_tool_and_the_principal() {
        let over = eval("input.amount_cents > 10000", json!({"amount_cents": 25000}));
        assert_eq!(over, Ok(cel::Value::Bool(true)));
        let under = eval("input.amount_cents > 10000", json!({"amount_cents": 500}));
        assert_eq!(under, Ok(cel::Value::Bool(false)));
        let both = eval(
            "tool.name == 'issue_refund' && tool.effect == 'write' && principal.role == 'caller' \
             && principal.name == 'agent' && size(principal.claims) == 0",
            json!({}),
        );
        assert_eq!(both, Ok(cel::Value::Bool(true)));
        let big = eval("input.n > 10", json!({"n": u64::MAX}));
        assert_eq!(big, Ok(cel::Value::Bool(true)));
        let listed = eval(
            "input.items.exists(i, i.price > 5)",
            json!({"items": [{"price": 9}]}),
        );
        assert_eq!(listed, Ok(cel::Value::Bool(true)));
    }

    #[test]
    fn a_missing_field_or_a_type_error_is_an_error_not_false() {
        assert!(eval("input.amount_cents > 10000", json!({})).is_err());
        assert!(eval("input.amount_cents > 10000", json!({"amount_cents": "x"})).is_err());
    }

    #[test]
    fn a_token_principals_claims_are_seen() {
        let mut principal = Principal::new(Some("corp:dana".into()), Role::Caller);
        let claims = json!({"groups": ["finance"], "sub": "dana"});
        principal.claims = Some(Arc::new(claims.as_object().unwrap().clone()));
        let input = json!({});
        let expression = Expression::compile("'finance' in principal.claims.groups").unwrap();
        let result = expression.evaluate(&scope_with(&input, &principal));
        assert_eq!(result, Ok(cel::Value::Bool(true)));
    }

    #[test]
    fn an_unknown_variable_or_bad_syntax_is_refused() {
        let err = Expression::compile("amount > 5").unwrap_err();
        assert!(err.contains("`amount`"), "{err}");
        assert!(Expression::compile("input.a >").is_err());
        assert!(Expression::compile("  ").is_err());
        // Variables bound by a macro, and type names, are not unknown.
        Expression::compile("input.items.all(x, x > 1) && type(input.n) == int").unwrap();
    }

    #[test]
    fn a_field_the_schema_cannot_have_is_refused() {
        let schema = json!({
            "type": "object",
            "properties": {
                "amount_cents": {"type": "integer"},
                "to": {"$ref": "#/$defs/Party"},
                "meta": {"type": "object"},
            },
            "additionalProperties": false,
            "$defs": {"Party": {"type": "object", "properties": {"iban": {"type": "string"}},
                                "additionalProperties": false}},
        });
        let check = |source: &str| {
            Expression::compile(source)
                .unwrap()
                .check_input_fields(&schema)
        };
        check("input.amount_cents > 5 && has(input.to.iban) && input.meta.anything == 1").unwrap();
        let err = check("input.amount > 5").unwrap_err();
        assert!(err.contains("`input.amount`"), "{err}");
        let err = check("input.to.bic == 'x'").unwrap_err();
        assert!(err.contains("`input.to.bic`"), "{err}");
        let err = check("input.amount_cents.units > 1").unwrap_err();
        assert!(err.contains("integer"), "{err}");
        // A schema that allows more refuses nothing.
        Expression::compile("input.whatever")
            .unwrap()
            .check_input_fields(&json!({"type": "object"}))
            .unwrap();
    }
}
