//! `$ref` inlining: many clients (MCP clients most of all, and some providers) do not follow
//! references, so each provider copy of a schema carries its targets in place. A target that
//! leads back to itself (a recursive type) cannot be written out in full; it stays a `$ref`,
//! into the root `$defs`, which every format here allows.
//!
//! References are local JSON Pointers (`#/$defs/Name`, `#`, `#/properties/a`...). One that
//! does not resolve inside the schema (an external URL, a dangling pointer) is dropped from the
//! copy, with its siblings kept: the copy only loses a constraint, and the tool's own schema,
//! which every call is checked against, keeps it.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value, json};

use super::walk;
use crate::base::json_ref::pointer_of;

/// The most object schemas an inlined copy may hold. Inlining a type used in many places
/// multiplies it; past this, every target stays a `$ref` into `$defs` instead.
const MAX_INLINED_NODES: usize = 20_000;

/// Keywords that only annotate: beside a `$ref`, the referring site's value wins.
const ANNOTATIONS: [&str; 8] = [
    "description",
    "title",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$comment",
];

/// `root` with every local `$ref` replaced by its target, except targets on a cycle, which are
/// moved to the root `$defs` (only those) and referred to as `#/$defs/<name>`. Nested `$defs`
/// and `definitions` are gone from the result.
pub(crate) fn inline(root: &Value) -> Value {
    let targets = Targets::collect(root);
    let cyclic = targets.on_cycles();
    if let Some(inlined) = Expander::new(root, &targets, &cyclic).run() {
        return inlined;
    }
    // Too big written out in full: every target stays a reference, which keeps the copy as
    // small as the original.
    let every: HashSet<String> = targets.by_pointer.keys().cloned().collect();
    Expander::new(root, &targets, &every)
        .unbounded()
        .run()
        .expect("an expansion without a budget completes")
}

/// Every reference target reachable from the root, with the targets each one refers to.
struct Targets<'a> {
    /// Target pointer → (its schema, the pointers it refers to). Absent: it does not resolve.
    by_pointer: BTreeMap<String, (&'a Value, Vec<String>)>,
}

impl<'a> Targets<'a> {
    fn collect(root: &'a Value) -> Self {
        let mut by_pointer = BTreeMap::new();
        let mut queue = refs_in(root);
        while let Some(pointer) = queue.pop() {
            if by_pointer.contains_key(&pointer) {
                continue;
            }
            // A pointer at something that is not a schema resolves to nothing usable.
            let Some(target) = root
                .pointer(&pointer)
                .filter(|target| target.is_object() || target.is_boolean())
            else {
                continue;
            };
            let out = refs_in(target);
            queue.extend(out.iter().cloned());
            by_pointer.insert(pointer, (target, out));
        }
        Targets { by_pointer }
    }

    /// The targets that can reach themselves through references.
    fn on_cycles(&self) -> HashSet<String> {
        self.by_pointer
            .keys()
            .filter(|start| {
                let mut seen = HashSet::new();
                let mut stack: Vec<&String> = self.by_pointer[*start].1.iter().collect();
                while let Some(next) = stack.pop() {
                    if next == *start {
                        return true;
                    }
                    if seen.insert(next)
                        && let Some((_, out)) = self.by_pointer.get(next)
                    {
                        stack.extend(out);
                    }
                }
                false
            })
            .cloned()
            .collect()
    }
}

/// The local pointers `schema` refers to, not counting the contents of its `$defs` (a
/// definition matters only where it is referred to).
fn refs_in(schema: &Value) -> Vec<String> {
    fn scan(schema: &Value, out: &mut Vec<String>) {
        let Value::Object(obj) = schema else {
            return;
        };
        if let Some(pointer) = obj.get("$ref").and_then(Value::as_str).and_then(pointer_of) {
            out.push(pointer);
        }
        walk::children(obj, &mut |key, child| {
            if key != "$defs" && key != "definitions" {
                scan(child, out);
            }
        });
    }
    let mut out = Vec::new();
    scan(schema, &mut out);
    out
}

/// Writes the copy out: targets inlined, kept ones referred to by their `$defs` name.
struct Expander<'a> {
    root: &'a Value,
    targets: &'a Targets<'a>,
    /// Kept target pointer → its name in the root `$defs`.
    names: HashMap<String, String>,
    /// Object schemas left to write; `None`: no limit.
    budget: Option<usize>,
}

impl<'a> Expander<'a> {
    fn new(root: &'a Value, targets: &'a Targets<'a>, kept: &HashSet<String>) -> Self {
        let mut taken = HashSet::new();
        let mut names = HashMap::new();
        // In pointer order, so the names do not depend on hashing.
        let mut kept: Vec<&String> = kept.iter().collect();
        kept.sort();
        for pointer in kept {
            let base = def_name(pointer, root);
            let mut name = base.clone();
            let mut n = 2;
            while !taken.insert(name.clone()) {
                name = format!("{base}_{n}");
                n += 1;
            }
            names.insert(pointer.clone(), name);
        }
        Expander {
            root,
            targets,
            names,
            budget: Some(MAX_INLINED_NODES),
        }
    }

    fn unbounded(mut self) -> Self {
        self.budget = None;
        self
    }

    /// The copy, or `None` when it would be larger than the budget.
    fn run(mut self) -> Option<Value> {
        let mut out = self.expand(self.root)?;
        let mut defs = Map::new();
        let mut kept: Vec<(&String, &String)> = self.names.iter().collect();
        kept.sort_by(|a, b| a.1.cmp(b.1));
        let kept: Vec<(String, String)> = kept
            .into_iter()
            .map(|(p, n)| (p.clone(), n.clone()))
            .collect();
        for (pointer, name) in kept {
            let (target, _) = self.targets.by_pointer[&pointer];
            defs.insert(name, self.expand(target)?);
        }
        if !defs.is_empty() {
            if !out.is_object() {
                out = json!({ "allOf": [out] });
            }
            out["$defs"] = Value::Object(defs);
        }
        Some(out)
    }

    fn spend(&mut self) -> Option<()> {
        if let Some(left) = &mut self.budget {
            *left = left.checked_sub(1)?;
        }
        Some(())
    }

    fn expand(&mut self, schema: &Value) -> Option<Value> {
        let Value::Object(obj) = schema else {
            return Some(schema.clone());
        };
        self.spend()?;
        let mut copy = obj.clone();
        copy.remove("$defs");
        copy.remove("definitions");
        let reference = match copy.remove("$ref") {
            Some(Value::String(reference)) => Some(reference),
            Some(other) => {
                // Not a reference at all; keep it as it was.
                copy.insert("$ref".into(), other);
                None
            }
            None => None,
        };
        let mut failed = false;
        walk::children_mut(&mut copy, &mut |_, child| {
            if failed {
                return;
            }
            match self.expand(child) {
                Some(expanded) => *child = expanded,
                None => failed = true,
            }
        });
        if failed {
            return None;
        }
        let Some(reference) = reference else {
            return Some(Value::Object(copy));
        };
        let pointer = pointer_of(&reference);
        if let Some(name) = pointer.as_ref().and_then(|p| self.names.get(p)) {
            copy.insert("$ref".into(), format!("#/$defs/{}", escape(name)).into());
            return Some(Value::Object(copy));
        }
        match pointer.and_then(|p| self.targets.by_pointer.get(&p)) {
            Some((target, _)) => {
                let target = self.expand(target)?;
                Some(merge(target, copy))
            }
            // Not local, or dangling: the copy does without it.
            None => Some(Value::Object(copy)),
        }
    }
}

/// A kept target's name in the root `$defs`: its own name where it had one, made of characters
/// every provider accepts.
fn def_name(pointer: &str, root: &Value) -> String {
    let raw = if pointer.is_empty() {
        root.get("title")
            .and_then(Value::as_str)
            .unwrap_or("Root")
            .to_owned()
    } else {
        let last = pointer.rsplit('/').next().unwrap_or("Def");
        last.replace("~1", "/").replace("~0", "~")
    };
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() { "Def".into() } else { name }
}

/// A name as a JSON Pointer segment inside a URI fragment (names are already plain).
fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// An inlined target with the keywords that stood beside its `$ref`: annotations of the
/// referring site win; a validation keyword both sides set differently keeps both, as `allOf`.
fn merge(target: Value, siblings: Map<String, Value>) -> Value {
    if siblings.is_empty() {
        return target;
    }
    let mut merged = match target {
        Value::Object(obj) => obj,
        Value::Bool(false) => {
            let mut obj = Map::new();
            obj.insert("not".into(), json!({}));
            obj
        }
        _ => Map::new(),
    };
    let mut rest = Map::new();
    for (key, value) in siblings {
        match merged.get(&key) {
            None => {
                merged.insert(key, value);
            }
            Some(existing) if *existing == value => {}
            Some(_) if ANNOTATIONS.contains(&key.as_str()) => {
                merged.insert(key, value);
            }
            Some(_) => {
                rest.insert(key, value);
            }
        }
    }
    if rest.is_empty() {
        Value::Object(merged)
    } else {
        json!({ "allOf": [merged, rest] })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_reference_is_inlined_and_defs_go() {
        let schema = json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A", "description": "the a"}},
            "$defs": {"A": {"type": "string", "description": "an A"}},
        });
        assert_eq!(
            inline(&schema),
            json!({
                "type": "object",
                "properties": {"a": {"type": "string", "description": "the a"}},
            })
        );
    }

    #[test]
    fn a_reference_chain_is_inlined_to_its_end() {
        let schema = json!({
            "properties": {"a": {"$ref": "#/$defs/A"}},
            "$defs": {
                "A": {"type": "array", "items": {"$ref": "#/definitions/B"}},
            },
            "definitions": {"B": {"type": "integer"}},
        });
        assert_eq!(
            inline(&schema),
            json!({"properties": {"a": {"type": "array", "items": {"type": "integer"}}}})
        );
    }

    #[test]
    fn a_recursive_target_stays_a_reference_into_root_defs() {
        let schema = json!({
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/Tree"}, "leaf": {"$ref": "#/$defs/Leaf"}},
            "$defs": {
                "Tree": {
                    "type": "object",
                    "properties": {
                        "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}},
                        "leaf": {"$ref": "#/$defs/Leaf"},
                    },
                },
                "Leaf": {"type": "string"},
                "Unused": {"type": "null"},
            },
        });
        assert_eq!(
            inline(&schema),
            json!({
                "type": "object",
                "properties": {"tree": {"$ref": "#/$defs/Tree"}, "leaf": {"type": "string"}},
                "$defs": {"Tree": {
                    "type": "object",
                    "properties": {
                        "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}},
                        "leaf": {"type": "string"},
                    },
                }},
            })
        );
    }

    #[test]
    fn recursion_through_the_root_gets_a_def_of_its_own() {
        let schema = json!({
            "title": "Node",
            "type": "object",
            "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
        });
        let inlined = inline(&schema);
        assert_eq!(
            inlined["properties"]["next"]["anyOf"][0],
            json!({"$ref": "#/$defs/Node"})
        );
        assert_eq!(
            inlined["$defs"]["Node"]["properties"]["next"]["anyOf"][0],
            json!({"$ref": "#/$defs/Node"})
        );
    }

    #[test]
    fn mutual_recursion_keeps_both_and_a_pointer_into_a_property_is_followed() {
        let schema = json!({
            "properties": {
                "a": {"$ref": "#/$defs/A"},
                "b": {"$ref": "#/properties/a/description"},
                "c": {"$ref": "#/$defs/C/properties/x"},
            },
            "$defs": {
                "A": {"properties": {"b": {"$ref": "#/$defs/B"}}},
                "B": {"properties": {"a": {"$ref": "#/$defs/A"}}},
                "C": {"properties": {"x": {"type": "boolean"}}},
            },
        });
        let inlined = inline(&schema);
        assert_eq!(inlined["properties"]["a"], json!({"$ref": "#/$defs/A"}));
        assert_eq!(
            inlined["$defs"]["A"]["properties"]["b"],
            json!({"$ref": "#/$defs/B"})
        );
        assert_eq!(
            inlined["$defs"]["B"]["properties"]["a"],
            json!({"$ref": "#/$defs/A"})
        );
        // A pointer at something that is not a schema (here, nothing) drops out.
        assert_eq!(inlined["properties"]["b"], json!({}));
        assert_eq!(inlined["properties"]["c"], json!({"type": "boolean"}));
    }

    #[test]
    fn an_external_or_dangling_reference_is_dropped_with_its_siblings_kept() {
        let schema = json!({
            "properties": {
                "a": {"$ref": "https://example.com/a.json", "description": "far"},
                "b": {"$ref": "#/$defs/Missing"},
            },
        });
        assert_eq!(
            inline(&schema),
            json!({"properties": {"a": {"description": "far"}, "b": {}}})
        );
    }

    #[test]
    fn conflicting_validation_beside_a_reference_keeps_both() {
        let schema = json!({
            "properties": {"a": {"$ref": "#/$defs/A", "minimum": 5}},
            "$defs": {"A": {"type": "integer", "minimum": 1}},
        });
        assert_eq!(
            inline(&schema)["properties"]["a"],
            json!({"allOf": [{"type": "integer", "minimum": 1}, {"minimum": 5}]})
        );
    }

    #[test]
    fn an_exponential_expansion_keeps_references_instead() {
        // Each level uses the one below twice: 2^30 copies written out in full.
        let mut defs = Map::new();
        for level in 0..30 {
            defs.insert(
                format!("L{level}"),
                json!({"properties": {
                    "x": {"$ref": format!("#/$defs/L{}", level + 1)},
                    "y": {"$ref": format!("#/$defs/L{}", level + 1)},
                }}),
            );
        }
        defs.insert("L30".into(), json!({"type": "string"}));
        let schema = json!({"properties": {"top": {"$ref": "#/$defs/L0"}}, "$defs": defs});
        let inlined = inline(&schema);
        assert_eq!(inlined["properties"]["top"], json!({"$ref": "#/$defs/L0"}));
        assert_eq!(inlined["$defs"].as_object().unwrap().len(), 31);
    }
}
