//! The database URL as logs and errors may show it: without its password, whatever its shape.
//!
//! The redaction reads the text itself, before and whatever the parser makes of it: a URL's
//! password with an unencoded `/` or `?` (`postgres://u:pa/ss@h/db`) ends the authority for a
//! reader that stops there, and one with an `@` is cut at its first `@` by tokio-postgres, the
//! rest becoming the host that errors name. So the password is taken to run to the *last* `@`
//! (more is hidden rather than less), and a URL with more than one `@` is refused before it is
//! parsed ([`Redacted::ambiguous`]).

/// `url` with any password in it replaced by `***`: the `user:password@` of a URL (up to its
/// last `@`), and a `password=` parameter of a URL's query or of the `key=value` form, quoted
/// or not. Made for text that may not parse: it never fails and never shows less.
pub fn redact_url(url: &str) -> String {
    Redacted::of(url).shown
}

/// A database URL, read for showing.
pub(super) struct Redacted {
    /// The text with every password replaced by `***`.
    pub(super) shown: String,
    /// A URL with more than one `@`: tokio-postgres ends the password at the first, so the
    /// rest of the password would be taken for the host, which errors and logs name.
    pub(super) ambiguous: bool,
}

impl Redacted {
    /// Reads `url`.
    pub(super) fn of(url: &str) -> Redacted {
        let mut shown = url.to_owned();
        let mut ambiguous = false;
        let is_url = url.contains("://");
        if let Some(scheme) = url.find("://") {
            let rest = scheme + 3;
            if let Some(at) = url[rest..].rfind('@') {
                let userinfo = &url[rest..rest + at];
                ambiguous = userinfo.contains('@');
                if let Some(colon) = userinfo.find(':') {
                    shown.replace_range(rest + colon + 1..rest + at, "***");
                }
            }
        }
        Redacted {
            shown: redact_parameters(&shown, is_url),
            ambiguous,
        }
    }
}

/// `text` with the value of every `password` parameter replaced by `***`. In a URL's query a
/// value runs to the next `&` or `#`; in the `key=value` form, to the next white space, or
/// when quoted, to the closing quote (past `\'` escapes; to the end when there is none).
fn redact_parameters(text: &str, is_url: bool) -> String {
    const KEY: &str = "password";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(found) = rest.find(KEY) {
        let after_key = &rest[found + KEY.len()..];
        // `password = value` is valid in the key=value form: spaces around `=`.
        let eq = after_key.trim_start();
        let Some(value) = eq.strip_prefix('=') else {
            out.push_str(&rest[..found + KEY.len()]);
            rest = after_key;
            continue;
        };
        let value = if is_url { value } else { value.trim_start() };
        let end = if !is_url && value.starts_with('\'') {
            closing_quote(value)
        } else if is_url {
            value.find(['&', '#']).unwrap_or(value.len())
        } else {
            value.find(char::is_whitespace).unwrap_or(value.len())
        };
        let value_start = text.len() - rest.len() + (rest.len() - value.len());
        out.push_str(&text[text.len() - rest.len()..value_start]);
        out.push_str("***");
        rest = &value[end..];
    }
    out.push_str(rest);
    out
}

/// The length of a quoted value, its quotes included.
fn closing_quote(value: &str) -> usize {
    let mut escaped = false;
    for (i, c) in value.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '\'' => return i + 1,
            _ => {}
        }
    }
    value.len()
}

#[cfg(test)]
mod tests {
    use super::{Redacted, redact_url};

    #[test]
    fn passwords_never_survive_redaction() {
        for (url, shown) in [
            (
                "postgres://app:s3cret@db:5432/toolgate",
                "postgres://app:***@db:5432/toolgate",
            ),
            ("postgres://app@db/toolgate", "postgres://app@db/toolgate"),
            (
                "postgresql://app:p%40ss@db/x?sslmode=disable&password=other",
                "postgresql://app:***@db/x?sslmode=disable&password=***",
            ),
            (
                "host=db user=app password=s3cret dbname=x",
                "host=db user=app password=*** dbname=x",
            ),
        ] {
            assert_eq!(redact_url(url), shown);
            assert!(!redact_url(url).contains("s3cret"));
        }
    }

    /// The shapes a parser misreads or refuses: what is shown holds no piece of the password.
    #[test]
    fn a_password_of_any_shape_is_hidden() {
        for (url, shown, secret) in [
            (
                "postgres://u:pa/ss@h/db",
                "postgres://u:***@h/db",
                &["pa", "ss"][..],
            ),
            (
                "postgres://u:pa?ss@h/db",
                "postgres://u:***@h/db",
                &["pa", "ss"],
            ),
            (
                "postgres://u:pa#ss@h/db",
                "postgres://u:***@h/db",
                &["pa", "ss"],
            ),
            ("postgres://u:p@ss@h/db", "postgres://u:***@h/db", &["p@ss"]),
            (
                "postgres://u:1234/ss=1@h/db",
                "postgres://u:***@h/db",
                &["1234", "ss"],
            ),
            (
                "host=h password='a b' user=u",
                "host=h password=*** user=u",
                &["a b", "'a"],
            ),
            (
                "host=h password = 'it\\'s a b' user=u",
                "host=h password = *** user=u",
                &["it", "s a b"],
            ),
            (
                "host=h password='never closed user=u",
                "host=h password=***",
                &["never", "closed"],
            ),
            (
                "postgres://u@h/db?password=p4 s5&sslmode=disable",
                "postgres://u@h/db?password=***&sslmode=disable",
                &["p4", "s5"],
            ),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            for piece in secret {
                assert!(!redact_url(url).contains(piece), "{url}: {piece}");
            }
        }
    }

    #[test]
    fn a_url_the_parser_would_misread_is_ambiguous() {
        for url in ["postgres://u:p@ss@h/db", "postgres://u:a@b@c@h/db"] {
            assert!(Redacted::of(url).ambiguous, "{url}");
        }
        for url in [
            "postgres://u:pa/ss@h/db",
            "postgres://u:pa?ss@h/db",
            "postgres://u:p%40ss@h/db",
            "postgres://h/db",
            "host=h password='a/b?c@d'",
        ] {
            assert!(!Redacted::of(url).ambiguous, "{url}");
        }
    }
}
