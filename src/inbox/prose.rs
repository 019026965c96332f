//! Text that tools, schemas and upstream servers write for people (a tool's description, a
//! field's help), with its inline `code` told apart.
//!
//! Such text is never trusted: it is split into plain and code segments, and the templates
//! escape each one like any other text and wrap the code ones in `<code>`. Nothing in it is
//! ever passed through as markup, so a description that says `` `<script>` `` shows those
//! characters in a code span.

/// Text with inline code: the segments in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Prose(pub(crate) Vec<Segment>);

/// A run of plain text, or of inline code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Whether it was written between backticks.
    pub(crate) code: bool,
    /// The text, unescaped: the template escapes it.
    pub(crate) text: String,
}

impl Prose {
    /// `text` split at its backticks: a pair encloses code; a backtick without a partner, or
    /// a pair with nothing between, stays as written.
    pub(crate) fn parse(text: &str) -> Prose {
        let mut segments: Vec<Segment> = Vec::new();
        let mut push = |code: bool, text: &str| {
            if text.is_empty() {
                return;
            }
            match segments.last_mut() {
                Some(last) if !last.code && !code => last.text.push_str(text),
                _ => segments.push(Segment {
                    code,
                    text: text.to_owned(),
                }),
            }
        };
        let mut rest = text;
        while let Some(open) = rest.find('`') {
            let after = &rest[open + 1..];
            match after.find('`') {
                Some(0) => {
                    push(false, &rest[..open + 2]);
                    rest = &after[1..];
                }
                Some(close) => {
                    push(false, &rest[..open]);
                    push(true, &after[..close]);
                    rest = &after[close + 1..];
                }
                None => break,
            }
        }
        push(false, rest);
        Prose(segments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(prose: &Prose) -> Vec<(bool, &str)> {
        prose.0.iter().map(|s| (s.code, s.text.as_str())).collect()
    }

    #[test]
    fn backtick_pairs_are_code_and_the_rest_is_text() {
        let prose = Prose::parse("Always `issued`, never `<script>`.");
        assert_eq!(
            shown(&prose),
            [
                (false, "Always "),
                (true, "issued"),
                (false, ", never "),
                (true, "<script>"),
                (false, ".")
            ]
        );
        assert_eq!(
            shown(&Prose::parse("a ` lone one")),
            [(false, "a ` lone one")]
        );
        assert_eq!(
            shown(&Prose::parse("empty `` pair")),
            [(false, "empty `` pair")]
        );
        assert_eq!(shown(&Prose::parse("`x`")), [(true, "x")]);
        assert!(Prose::parse("").0.is_empty());
    }
}
