//! Null as absent: a `null` sent for a property that the tool's own schema makes optional but
//! not nullable is read as the property left out.
//!
//! A model in OpenAI's strict mode must send every property, so the strict copy of a schema
//! makes each optional property nullable (`crate::schema::openai`), and the model sends `null`
//! for one it means to leave out. The tool's own schema would refuse that `null`; this removes
//! it first, so the input the model meant is what is validated, keyed, recorded and handed to
//! the handler. The same holds for every door (REST, MCP): a `null` the schema itself accepts
//! (an `Option` field, a nullable type) stays, and a `null` for a required property is refused
//! as before.
//!
//! Which `null`s to remove is worked out once per tool, at registration, from the input
//! schema: a [`NullPlan`] names, object by object, the properties to strip and where to look
//! deeper (through `properties`, `$ref`, `items`, `additionalProperties` and unions). A tool
//! with nothing to strip (most, `echo` among them) has no plan, and its calls pay nothing.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value};

use crate::base::json_ref::resolve_ref;

/// Where in a tool's input a `null` means "absent". Built once per tool.
#[derive(Debug)]
pub(crate) struct NullPlan {
    /// Node 0 is the input's root.
    nodes: Vec<Node>,
}

/// What to do with one object (or array) of the input.
#[derive(Debug, Default)]
struct Node {
    /// Properties removed when they are `null`.
    strip: Vec<Box<str>>,
    /// Properties whose values have nulls of their own to strip.
    children: Vec<(Box<str>, usize)>,
    /// For an array, the plan of each item.
    items: Option<usize>,
    /// For a map, the plan of each value not named in `declared`.
    values: Option<usize>,
    /// The properties the schema names (only kept when `values` is set).
    declared: Vec<Box<str>>,
}

impl NullPlan {
    /// The plan for an input schema; `None` when no `null` in any input would be stripped.
    pub(crate) fn for_schema(schema: &Value) -> Option<NullPlan> {
        let mut builder = Builder {
            root: schema,
            drafts: Vec::new(),
            by_ref: HashMap::new(),
            building: HashSet::new(),
        };
        let root = builder.node_for(schema)?;
        builder.compile(root)
    }

    /// Removes from `input` every `null` the plan names.
    pub(crate) fn apply(&self, input: &mut Value) {
        self.apply_at(0, input);
    }

    fn apply_at(&self, id: usize, value: &mut Value) {
        let node = &self.nodes[id];
        match value {
            Value::Object(map) => {
                for name in &node.strip {
                    if map.get(&**name).is_some_and(Value::is_null) {
                        map.remove(&**name);
                    }
                }
                for (name, child) in &node.children {
                    if let Some(value) = map.get_mut(&**name) {
                        self.apply_at(*child, value);
                    }
                }
                if let Some(values) = node.values {
                    for (name, value) in map.iter_mut() {
                        if !node.declared.iter().any(|d| **d == **name) {
                            self.apply_at(values, value);
                        }
                    }
                }
            }
            Value::Array(items) => {
                if let Some(item) = node.items {
                    items
                        .iter_mut()
                        .for_each(|value| self.apply_at(item, value));
                }
            }
            _ => {}
        }
    }
}

/// Keywords that say nothing of the values.
const ANNOTATIONS: [&str; 6] = [
    "description",
    "title",
    "default",
    "examples",
    "deprecated",
    "$comment",
];

/// What the schema says of one property of an object.
#[derive(Debug, Clone, PartialEq)]
struct Mention {
    /// Optional and not nullable: a `null` for it is stripped.
    strip: bool,
    /// The plan of its value.
    child: Option<usize>,
}

/// A node while the plan is built: every property the schema mentions.
#[derive(Debug, Clone, Default, PartialEq)]
struct Draft {
    mentions: BTreeMap<String, Mention>,
    items: Option<usize>,
    values: Option<usize>,
}

struct Builder<'a> {
    root: &'a Value,
    drafts: Vec<Draft>,
    /// The node of each `$ref` target, so a recursive type is one node that refers to itself.
    by_ref: HashMap<String, usize>,
    /// Nodes of `$ref` targets still being built (their drafts are not complete yet).
    building: HashSet<usize>,
}

impl<'a> Builder<'a> {
    /// The node for the values `schema` describes, if they may hold objects or arrays.
    fn node_for(&mut self, schema: &'a Value) -> Option<usize> {
        let obj = schema.as_object()?;
        if let Some(through) = pass_through(obj) {
            return self.node_for(through);
        }
        if let Some(reference) = obj.get("$ref").and_then(Value::as_str)
            && obj
                .keys()
                .all(|key| key == "$ref" || ANNOTATIONS.contains(&key.as_str()))
        {
            return self.ref_node(reference);
        }
        let draft = self.draft(schema).unwrap_or_default();
        self.drafts.push(draft);
        Some(self.drafts.len() - 1)
    }

    /// The node of a `$ref`'s target: one per target, so a recursive type is one node that
    /// refers to itself.
    fn ref_node(&mut self, reference: &str) -> Option<usize> {
        if let Some(id) = self.by_ref.get(reference) {
            return Some(*id);
        }
        let target = resolve_ref(self.root, reference)?;
        let id = self.drafts.len();
        self.drafts.push(Draft::default());
        self.by_ref.insert(reference.to_owned(), id);
        self.building.insert(id);
        let draft = self.draft(target).unwrap_or_default();
        self.drafts[id] = draft;
        self.building.remove(&id);
        Some(id)
    }

    /// Everything `schema` says of its objects' properties, its arrays' items and its maps'
    /// values, its own keywords and its unions' together; `None` when that cannot be known
    /// (a union member still being built).
    fn draft(&mut self, schema: &'a Value) -> Option<Draft> {
        let obj = schema.as_object()?;
        let mut parts = Vec::new();
        let mut own = Draft::default();
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if let Some(Value::Object(properties)) = obj.get("properties") {
            for (name, property) in properties {
                let optional = !required.contains(&name.as_str());
                let mention = Mention {
                    strip: optional && !admits_null(property, self.root),
                    child: self.node_for(property),
                };
                own.mentions.insert(name.clone(), mention);
            }
        }
        for name in required {
            own.mentions.entry(name.to_owned()).or_insert(Mention {
                strip: false,
                child: None,
            });
        }
        if let Some(items) = obj.get("items") {
            own.items = self.node_for(items);
        }
        if let Some(values) = obj.get("additionalProperties") {
            own.values = self.node_for(values);
        }
        parts.push(own);
        if let Some(reference) = obj.get("$ref").and_then(Value::as_str) {
            let id = self.ref_node(reference)?;
            parts.push(self.draft_of(id)?);
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            let Some(Value::Array(members)) = obj.get(key) else {
                continue;
            };
            let mut drafts = Vec::new();
            for member in members.iter().filter(|m| !is_null_only(m)) {
                let id = self.node_for(member)?;
                drafts.push(self.draft_of(id)?);
            }
            parts.push(merge(drafts));
        }
        Some(merge(parts))
    }

    /// The finished draft of node `id`; `None` while it is still being built.
    fn draft_of(&self, id: usize) -> Option<Draft> {
        (!self.building.contains(&id)).then(|| self.drafts[id].clone())
    }

    /// The plan from `root`, with the nodes that strip nothing, here or below, left out.
    fn compile(self, root: usize) -> Option<NullPlan> {
        let drafts = self.drafts;
        let mut useful = vec![false; drafts.len()];
        let mut changed = true;
        while changed {
            changed = false;
            for (id, draft) in drafts.iter().enumerate() {
                if useful[id] {
                    continue;
                }
                let leads = |child: Option<usize>| child.is_some_and(|c| useful[c]);
                let now = draft.mentions.values().any(|m| m.strip || leads(m.child))
                    || leads(draft.items)
                    || leads(draft.values);
                if now {
                    useful[id] = true;
                    changed = true;
                }
            }
        }
        if !useful[root] {
            return None;
        }
        // Renumber the useful nodes, the root first.
        let mut order = vec![root];
        order.extend((0..drafts.len()).filter(|id| *id != root && useful[*id]));
        let index: HashMap<usize, usize> =
            order.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let keep = |child: Option<usize>| child.filter(|c| useful[*c]).map(|c| index[&c]);
        let nodes = order
            .iter()
            .map(|id| {
                let draft = &drafts[*id];
                let values = keep(draft.values);
                Node {
                    strip: draft
                        .mentions
                        .iter()
                        .filter(|(_, m)| m.strip)
                        .map(|(name, _)| name.as_str().into())
                        .collect(),
                    children: draft
                        .mentions
                        .iter()
                        .filter_map(|(name, m)| Some((name.as_str().into(), keep(m.child)?)))
                        .collect(),
                    items: keep(draft.items),
                    values,
                    declared: if values.is_some() {
                        draft
                            .mentions
                            .keys()
                            .map(|name| name.as_str().into())
                            .collect()
                    } else {
                        Vec::new()
                    },
                }
            })
            .collect();
        Some(NullPlan { nodes })
    }
}

/// What several schemas say of the same values together (a schema's own keywords, its `$ref`,
/// its union's members): a property is stripped only if every part that mentions it would
/// strip it, and looked into only where they agree on how.
fn merge(parts: Vec<Draft>) -> Draft {
    let mut parts = parts.into_iter();
    let Some(mut merged) = parts.next() else {
        return Draft::default();
    };
    for part in parts {
        for (name, mention) in part.mentions {
            match merged.mentions.get_mut(&name) {
                None => {
                    merged.mentions.insert(name, mention);
                }
                Some(existing) => {
                    existing.strip &= mention.strip;
                    existing.child = agree(existing.child, mention.child);
                }
            }
        }
        merged.items = agree(merged.items, part.items);
        merged.values = agree(merged.values, part.values);
    }
    merged
}

/// One plan from two: the same, or whichever there is; two different ones look no deeper.
fn agree(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(a), Some(b)) if a == b => Some(a),
        (Some(_), Some(_)) => None,
        (a, b) => a.or(b),
    }
}

/// A schema that only stands for another (`{"$ref": …}` with a description, or an `Option`'s
/// `anyOf: [T, {"type": "null"}]`): the one it stands for.
fn pass_through(obj: &Map<String, Value>) -> Option<&Value> {
    let mut through = None;
    for (key, value) in obj {
        match key.as_str() {
            "anyOf" | "oneOf" => {
                let members: Vec<&Value> = value
                    .as_array()?
                    .iter()
                    .filter(|m| !is_null_only(m))
                    .collect();
                if members.len() != 1 || through.is_some() {
                    return None;
                }
                through = Some(members[0]);
            }
            key if ANNOTATIONS.contains(&key) => {}
            _ => return None,
        }
    }
    through
}

/// `{"type": "null"}`: a union member that only adds `null`.
fn is_null_only(schema: &Value) -> bool {
    schema.get("type").is_some_and(|kind| kind == "null")
        && schema
            .as_object()
            .is_some_and(|obj| obj.keys().all(|k| k == "type" || k == "description"))
}

/// Whether `schema` may accept `null`, resolving `$ref`s inside `root`. Errs towards `true`:
/// `false` only when a keyword plainly refuses it (a `type` without `"null"`, an `enum` or
/// `const` without it, a union none of whose members accepts it).
pub(crate) fn admits_null(schema: &Value, root: &Value) -> bool {
    admits_null_within(schema, root, 0)
}

/// How many `$ref`s deep [`admits_null`] follows before it stops refusing.
const MAX_REF_DEPTH: usize = 32;

fn admits_null_within(schema: &Value, root: &Value, depth: usize) -> bool {
    let obj = match schema {
        Value::Bool(accepts) => return *accepts,
        Value::Object(obj) => obj,
        _ => return true,
    };
    if depth > MAX_REF_DEPTH {
        return true;
    }
    let admits = |s: &Value| admits_null_within(s, root, depth + 1);
    let refuses = match obj.get("type") {
        Some(Value::String(kind)) => kind != "null",
        Some(Value::Array(kinds)) => !kinds.iter().any(|k| k == "null"),
        _ => false,
    } || matches!(obj.get("enum"), Some(Value::Array(values)) if !values.contains(&Value::Null))
        || obj.get("const").is_some_and(|value| !value.is_null())
        || ["anyOf", "oneOf"].iter().any(|key| {
            matches!(obj.get(*key), Some(Value::Array(options)) if !options.iter().any(admits))
        })
        || matches!(obj.get("allOf"), Some(Value::Array(parts)) if !parts.iter().all(admits))
        || obj
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|reference| resolve_ref(root, reference))
            .is_some_and(|target| !admits(target))
        || obj
            .get("not")
            .is_some_and(|not| *not == Value::Bool(true) || *not == Value::Object(Map::new()));
    !refuses
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stripped(schema: &Value, mut input: Value) -> Value {
        if let Some(plan) = NullPlan::for_schema(schema) {
            plan.apply(&mut input);
        }
        input
    }

    #[test]
    fn a_schema_with_nothing_to_strip_has_no_plan() {
        let echo = json!({
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        });
        assert!(NullPlan::for_schema(&echo).is_none());
        let nullable = json!({
            "type": "object",
            "properties": {"note": {"type": ["string", "null"]}, "any": {}},
        });
        assert!(NullPlan::for_schema(&nullable).is_none());
    }

    #[test]
    fn a_null_is_stripped_only_where_optional_and_not_nullable() {
        let schema = json!({
            "type": "object",
            "properties": {
                "needed": {"type": "string"},
                "limit": {"type": "integer", "default": 10},
                "note": {"type": ["string", "null"]},
            },
            "required": ["needed"],
        });
        assert_eq!(
            stripped(
                &schema,
                json!({"needed": null, "limit": null, "note": null})
            ),
            json!({"needed": null, "note": null})
        );
        assert_eq!(
            stripped(&schema, json!({"needed": "x", "limit": 3})),
            json!({"needed": "x", "limit": 3})
        );
    }

    #[test]
    fn nested_objects_are_followed_through_refs_options_and_arrays() {
        let schema = json!({
            "type": "object",
            "properties": {
                "inner": {"$ref": "#/$defs/Inner", "description": "in"},
                "maybe": {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}]},
                "list": {"type": "array", "items": {"$ref": "#/$defs/Inner"}},
                "map": {"type": "object", "additionalProperties": {"$ref": "#/$defs/Inner"}},
            },
            "$defs": {"Inner": {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "string"}},
                "required": ["y"],
            }},
        });
        let input = json!({
            "inner": {"x": null, "y": null},
            "maybe": {"x": null, "y": "b"},
            "list": [{"x": null, "y": "c"}, {"x": 1, "y": "d"}],
            "map": {"k": {"x": null, "y": "e"}},
        });
        assert_eq!(
            stripped(&schema, input),
            json!({
                "inner": {"y": null},
                "maybe": {"y": "b"},
                "list": [{"y": "c"}, {"x": 1, "y": "d"}],
                "map": {"k": {"y": "e"}},
            })
        );
    }

    #[test]
    fn a_recursive_type_is_one_node_that_refers_to_itself() {
        let schema = json!({
            "$ref": "#/$defs/Tree",
            "$defs": {"Tree": {
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}},
                    "next": {"anyOf": [{"$ref": "#/$defs/Tree"}, {"type": "null"}]},
                },
            }},
        });
        let input = json!({
            "label": null,
            "children": [{"label": null, "children": [{"label": null}]}],
            "next": {"label": null, "next": null},
        });
        assert_eq!(
            stripped(&schema, input),
            json!({"children": [{"children": [{}]}], "next": {"next": null}})
        );
    }

    #[test]
    fn union_members_strip_a_property_only_where_all_that_name_it_agree() {
        // Externally tagged: each variant its own property.
        let tagged = json!({
            "type": "object",
            "properties": {"action": {"oneOf": [
                {"type": "object", "properties": {"move": {"$ref": "#/$defs/Move"}}, "required": ["move"]},
                {"type": "object", "properties": {"stop": {"$ref": "#/$defs/Stop"}}, "required": ["stop"]},
            ]}},
            "$defs": {
                "Move": {"type": "object", "properties": {"speed": {"type": "number"}}},
                "Stop": {"type": "object", "properties": {"hard": {"type": "boolean"}}},
            },
        });
        assert_eq!(
            stripped(&tagged, json!({"action": {"move": {"speed": null}}})),
            json!({"action": {"move": {}}})
        );
        // Two members naming `x`, one nullable there: its null stays.
        let disagree = json!({"anyOf": [
            {"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "string"}}},
            {"type": "object", "properties": {"x": {"type": ["string", "null"]}}, "required": ["x"]},
        ]});
        assert_eq!(
            stripped(&disagree, json!({"x": null, "y": null})),
            json!({"x": null})
        );
    }

    #[test]
    fn null_is_refused_only_where_a_keyword_says_so() {
        let root = json!({"$defs": {"S": {"type": "string"}, "N": {"type": ["string", "null"]}}});
        let refuses = |schema: Value| !admits_null(&schema, &root);
        assert!(refuses(json!({"type": "string"})));
        assert!(refuses(json!({"type": ["string", "integer"]})));
        assert!(refuses(json!({"enum": ["a"]})));
        assert!(refuses(json!({"const": 1})));
        assert!(refuses(
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]})
        ));
        assert!(refuses(json!({"allOf": [{}, {"type": "string"}]})));
        assert!(refuses(json!({"$ref": "#/$defs/S", "description": "s"})));
        assert!(refuses(json!(false)));
        assert!(!refuses(json!({})));
        assert!(!refuses(json!(true)));
        assert!(!refuses(json!({"description": "anything"})));
        assert!(!refuses(json!({"type": ["string", "null"]})));
        assert!(!refuses(json!({"enum": ["a", null]})));
        assert!(!refuses(
            json!({"anyOf": [{"type": "string"}, {"type": "null"}]})
        ));
        assert!(!refuses(json!({"$ref": "#/$defs/N"})));
        assert!(!refuses(json!({"$ref": "#/$defs/Missing"})));
    }
}
