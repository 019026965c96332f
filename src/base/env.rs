//! `${NAME}` in a configured value, replaced from the environment: secrets of upstream headers
//! and environments, and of the trace exporter's headers, stay out of the file.

/// `value` with each `${NAME}` replaced by `env(NAME)`. `$` not followed by `{` is kept. The
/// error says what is wrong, to follow the key's name (`headers.Authorization names the
/// environment variable TOKEN, which is not set`).
pub(crate) fn expand(value: &str, env: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| "has a `${` without its `}`".to_owned())?;
        let name = &after[..end];
        let name_ok = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit();
        if !name_ok {
            return Err(format!(
                "`${{{name}}}` does not name an environment variable"
            ));
        }
        let found = env(name)
            .ok_or_else(|| format!("names the environment variable {name}, which is not set"))?;
        out.push_str(&found);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn variables_expand_and_a_missing_one_is_named() {
        let env = |name: &str| (name == "TOKEN").then(|| "s3cret".to_owned());
        assert_eq!(expand("Bearer ${TOKEN}", env).unwrap(), "Bearer s3cret");
        assert_eq!(expand("$5 and ${TOKEN}!", env).unwrap(), "$5 and s3cret!");
        let missing = expand("Bearer ${FILES_TOKEN}", env).unwrap_err();
        assert!(missing.contains("FILES_TOKEN"), "{missing}");
        assert!(expand("${", env).is_err());
        assert!(expand("${1X}", env).is_err());
    }
}
