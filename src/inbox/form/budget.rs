//! The page's budget: which parts of a schema are shown as controls, and which, too large, as
//! one JSON text area instead.
//!
//! A schema comes from a tool, and an upstream MCP server's tool is not ours: arrays nested a
//! few deep repeat their rows and row templates at every level (21 copies a level), so a
//! ~200-byte schema once made a 74 MB page. The plan is made from the schema alone, before
//! anything is rendered, by the same rules the renderer follows, so the renderer and the
//! reader of a submitted form (`read.rs`) make the same choice and a JSON area is parsed back
//! as JSON. An object that does not fit is opened and its properties planned one by one; an
//! array that does not fit (its rows are copies of one schema) becomes a JSON area whole.
//!
//! Each part is planned with room reserved for the smallest form of every part after it, so
//! the page as planned never passes [`MAX_CONTROLS`] and [`MAX_BYTES`]; what was typed into a
//! refused form is shown again on top of that, and is bounded by the request that sent it.

use std::collections::HashSet;
use std::io::Write;

use serde_json::Value;

use super::schema::{Schema, Shape};

/// The most controls and fieldsets in one form.
pub(super) const MAX_CONTROLS: u64 = 2_000;

/// The most HTML of one form, as estimated from its parts (the rest of the page is small).
pub(super) const MAX_BYTES: u64 = 900 * 1024;

/// The most of a schema shown beside a JSON text area.
pub(super) const MAX_SCHEMA_TEXT: usize = 16 * 1024;

/// The HTML of one control or fieldset besides its texts, and per byte of its JSON Pointer
/// (which its id, name, label's `for` and `aria-describedby` each repeat).
const NODE_BYTES: u64 = 600;
const POINTER_COPIES: u64 = 6;

/// The most array rows rendered before a person adds any (the renderer's rule).
pub(super) const MAX_INITIAL_ROWS: u64 = 20;

/// What one part of a form costs: its controls (and fieldsets), and its HTML, estimated.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Default)]
struct Cost {
    controls: u64,
    bytes: u64,
}

impl Cost {
    fn add(self, other: Cost) -> Cost {
        Cost {
            controls: self.controls.saturating_add(other.controls),
            bytes: self.bytes.saturating_add(other.bytes),
        }
    }

    fn times(self, copies: u64) -> Cost {
        Cost {
            controls: self.controls.saturating_mul(copies),
            bytes: self.bytes.saturating_mul(copies),
        }
    }

    fn less(self, other: Cost) -> Cost {
        Cost {
            controls: self.controls.saturating_sub(other.controls),
            bytes: self.bytes.saturating_sub(other.bytes),
        }
    }

    fn within(self, room: Cost) -> bool {
        self.controls <= room.controls && self.bytes <= room.bytes
    }
}

/// The rows an array shows before a person adds any (the renderer's rule), and its template.
pub(super) fn initial_rows(min_items: u64, required: bool) -> u64 {
    min_items.max(u64::from(required)).min(MAX_INITIAL_ROWS)
}

/// The parts of a schema shown as a JSON text area because they do not fit the page.
pub(super) struct Budget {
    /// The resolved schemas (by address) that are too large.
    over: HashSet<usize>,
}

fn address(schema: &Value) -> usize {
    std::ptr::from_ref(schema) as usize
}

impl Budget {
    /// Plans the form of `root`.
    pub(super) fn plan(root: &Value) -> Budget {
        let mut planner = Planner {
            schema: Schema { root },
            over: HashSet::new(),
            room: Cost {
                controls: MAX_CONTROLS,
                bytes: MAX_BYTES,
            },
        };
        planner.visit(root, 0, false, 0);
        Budget { over: planner.over }
    }

    /// The shape `written` is given in the form: its own, or JSON when it does not fit.
    pub(super) fn shape<'s>(
        &self,
        schema: Schema<'s>,
        written: &'s Value,
        depth: usize,
    ) -> Shape<'s> {
        if self.is_over(schema, written) {
            return Shape::Json;
        }
        schema.shape(written, depth)
    }

    /// Whether `written` is shown as JSON because it does not fit.
    pub(super) fn is_over(&self, schema: Schema<'_>, written: &Value) -> bool {
        !self.over.is_empty() && self.over.contains(&address(schema.resolve(written)))
    }
}

struct Planner<'s> {
    schema: Schema<'s>,
    over: HashSet<usize>,
    /// What is left for the parts not planned yet.
    room: Cost,
}

impl<'s> Planner<'s> {
    fn shape(&self, written: &'s Value, depth: usize) -> Shape<'s> {
        if self.over.contains(&address(self.schema.resolve(written))) {
            return Shape::Json;
        }
        self.schema.shape(written, depth)
    }

    /// Plans `written` within the room left; spends what it plans. `pointer` is the length of
    /// its JSON Pointer.
    fn visit(&mut self, written: &'s Value, depth: usize, required: bool, pointer: u64) {
        let whole = self.cost(written, depth, required, pointer, self.room);
        if whole.within(self.room) {
            self.room = self.room.less(whole);
            return;
        }
        let Shape::Object {
            properties,
            required: needed,
        } = self.shape(written, depth)
        else {
            // An array (or a part too large whatever it is): one JSON area.
            self.over.insert(address(self.schema.resolve(written)));
            self.room = self.room.less(self.json(written, pointer));
            return;
        };
        let children: Vec<(&'s Value, bool, u64)> = properties
            .iter()
            .map(|(key, sub)| {
                (
                    sub,
                    needed.contains(&key.as_str()),
                    pointer + 1 + key.len() as u64,
                )
            })
            .collect();
        let smallest: Vec<Cost> = children
            .iter()
            .map(|&(sub, needed, pointer)| self.smallest(sub, depth + 1, needed, pointer))
            .collect();
        let own = self.node(written, pointer, 0);
        let reserved = smallest.iter().fold(own, |sum, cost| sum.add(*cost));
        if !reserved.within(self.room) {
            self.over.insert(address(self.schema.resolve(written)));
            self.room = self.room.less(self.json(written, pointer));
            return;
        }
        self.room = self.room.less(reserved);
        for ((sub, needed, pointer), smallest) in children.into_iter().zip(smallest) {
            // Its reserved room is given back for it to plan within.
            self.room = self.room.add(smallest);
            self.visit(sub, depth + 1, needed, pointer);
        }
    }

    /// The least a part can cost: a leaf its own control, anything larger one JSON area.
    fn smallest(&self, written: &'s Value, depth: usize, required: bool, pointer: u64) -> Cost {
        match self.shape(written, depth) {
            Shape::Object { .. } | Shape::Array { .. } => self.json(written, pointer),
            _ => self.cost(written, depth, required, pointer, Cost::default()),
        }
    }

    /// What `written` costs rendered as controls, as the renderer renders it; once it passes
    /// `limit` the count stops (anything past it is as good as infinite), so this takes time
    /// in proportion to the budget, not to the page the schema would make.
    fn cost(
        &self,
        written: &'s Value,
        depth: usize,
        required: bool,
        pointer: u64,
        limit: Cost,
    ) -> Cost {
        match self.shape(written, depth) {
            Shape::Object {
                properties,
                required: needed,
            } => {
                let mut sum = self.node(written, pointer, 0);
                for (key, sub) in properties {
                    if !sum.within(limit) {
                        break;
                    }
                    let inner = pointer + 1 + key.len() as u64;
                    let needed = needed.contains(&key.as_str());
                    sum = sum.add(self.cost(sub, depth + 1, needed, inner, limit.less(sum)));
                }
                sum
            }
            Shape::Array { items, min_items } => {
                // The rows and the template are copies of one item: counted once.
                let copies = initial_rows(min_items, required) + 1;
                let own = self.node(written, pointer, 0);
                let each_limit = Cost {
                    controls: limit.controls / copies,
                    bytes: limit.bytes / copies,
                };
                // Rows are numbered: three more bytes of pointer is plenty for 20 rows.
                let each = self.cost(items, depth + 1, false, pointer + 3, each_limit);
                own.add(each.times(copies))
            }
            Shape::Json => self.json(written, pointer),
            Shape::Enum(values) => {
                let options: u64 = values.iter().map(|v| 40 + v.to_string().len() as u64).sum();
                self.node(written, pointer, options)
            }
            Shape::Text | Shape::Number { .. } | Shape::Boolean => self.node(written, pointer, 0),
        }
    }

    /// One control or fieldset of `written`, with `extra` bytes of its own.
    fn node(&self, written: &'s Value, pointer: u64, extra: u64) -> Cost {
        let resolved = self.schema.resolve(written);
        let text = |key: &str| {
            written
                .get(key)
                .or_else(|| resolved.get(key))
                .and_then(Value::as_str)
                .map_or(0, |text| text.len() as u64)
        };
        Cost {
            controls: 1,
            bytes: NODE_BYTES
                + POINTER_COPIES * pointer
                // The label, and the help (its prose marked up: twice, to be safe).
                + text("title")
                + 2 * text("description")
                + extra,
        }
    }

    /// `written` as one JSON text area, its schema shown beside it (cut at
    /// [`MAX_SCHEMA_TEXT`], escaped for HTML: up to six bytes a byte).
    fn json(&self, written: &'s Value, pointer: u64) -> Cost {
        let shown = schema_text_len(self.schema.resolve(written)).min(MAX_SCHEMA_TEXT) as u64;
        self.node(written, pointer, 6 * shown)
    }
}

/// The length of `schema` pretty-printed, counted up to just past [`MAX_SCHEMA_TEXT`] without
/// keeping the text.
fn schema_text_len(schema: &Value) -> usize {
    struct Counter(usize);
    impl Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            if self.0 > MAX_SCHEMA_TEXT {
                // Stops the printer: the rest is not shown.
                return Err(std::io::Error::other("long enough"));
            }
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    let _ = serde_json::to_writer_pretty(&mut counter, schema);
    counter.0
}
