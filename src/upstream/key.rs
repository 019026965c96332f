//! An upstream tool's idempotency key template (`idempotency_key = "write:{path}"` in its
//! policy): literal text and top-level input fields.

use serde_json::Value;

/// An idempotency key template: literal text and `{field}`s, each a top-level input field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(String),
}

impl KeyTemplate {
    /// Parses `write:{path}`; `{{` and `}}` are literal braces.
    pub fn parse(template: &str) -> Result<KeyTemplate, String> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut chars = template.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    text.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    text.push('}');
                }
                '{' => {
                    let mut field = String::new();
                    let mut closed = false;
                    for c in chars.by_ref() {
                        if c == '}' {
                            closed = true;
                            break;
                        }
                        field.push(c);
                    }
                    if !closed || field.is_empty() || field.contains('{') {
                        return Err("has a `{` that does not close around a field name".into());
                    }
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(Part::Field(field));
                }
                '}' => return Err("has a `}` that opens nothing (write `}}` for a brace)".into()),
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        if !parts.iter().any(|part| matches!(part, Part::Field(_))) {
            return Err(
                "names no input field: a key the same for every input would make every call \
                 after the first a replay of it"
                    .into(),
            );
        }
        Ok(KeyTemplate { parts })
    }

    /// The fields the template reads.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Field(field) => Some(field.as_str()),
            Part::Text(_) => None,
        })
    }

    /// The key of `input`; `None` when a field is missing or not a string, number or boolean
    /// (the call then runs without a key of its own).
    pub fn render(&self, input: &Value) -> Option<String> {
        let mut key = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => key.push_str(text),
                Part::Field(field) => match input.get(field)? {
                    Value::String(s) => key.push_str(s),
                    Value::Number(n) => key.push_str(&n.to_string()),
                    Value::Bool(b) => key.push_str(if *b { "true" } else { "false" }),
                    _ => return None,
                },
            }
        }
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_templates_render_top_level_fields() {
        let template = KeyTemplate::parse("write:{path}:{n}{{x}}").unwrap();
        assert_eq!(template.fields().collect::<Vec<_>>(), ["path", "n"]);
        assert_eq!(
            template
                .render(&json!({"path": "a.txt", "n": 3}))
                .as_deref(),
            Some("write:a.txt:3{x}")
        );
        assert_eq!(template.render(&json!({"path": "a.txt"})), None);
        assert_eq!(template.render(&json!({"path": {"x": 1}, "n": 1})), None);
        assert!(KeyTemplate::parse("constant").is_err());
        assert!(KeyTemplate::parse("a:{path").is_err());
        assert!(KeyTemplate::parse("a:}").is_err());
        assert!(KeyTemplate::parse("a:{}").is_err());
    }
}
