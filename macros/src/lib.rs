//! `#[derive(Tool)]`: writes a tool's `ToolMeta` (name, description, effect) from a `#[tool(...)]`
//! attribute and the type's doc comment.
//!
//! ```ignore
//! /// Pays an approved insurance claim.
//! #[derive(toolgate::Tool)]
//! #[tool(effect = "write")]           // name defaults to `pay_claim`, description to the doc
//! struct PayClaim;
//! ```
//!
//! Every mistake is a compile error pointing at what is wrong: an unknown key, a repeated key, an
//! effect other than `read` / `idempotent` / `write`, a missing effect, a name a model provider
//! would refuse, or no description at all. Use it through the `toolgate` crate, which re-exports
//! it as `toolgate::Tool`.

use proc_macro::TokenStream;
use quote::quote;
use syn::{Attribute, DeriveInput, Expr, ExprLit, Lit, LitStr, Meta, parse_macro_input};

/// Derives `toolgate::ToolMeta`. See the crate docs for the attribute's keys.
#[proc_macro_derive(Tool, attributes(tool))]
pub fn derive_tool(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// The keys given in `#[tool(...)]`, each with where it was written.
#[derive(Default)]
struct ToolArgs {
    name: Option<LitStr>,
    description: Option<LitStr>,
    effect: Option<LitStr>,
    /// The `tool` attribute, when there is one, for errors about what it lacks.
    attr: Option<Attribute>,
}

fn expand(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let args = parse_args(&input.attrs)?;
    // An error about a missing key points at the `#[tool]` attribute, or at the type's name.
    let missing = |message: &str| match &args.attr {
        Some(attr) => syn::Error::new_spanned(attr, message),
        None => syn::Error::new(input.ident.span(), message),
    };

    let name = match &args.name {
        Some(lit) => {
            let name = lit.value();
            if !is_valid_tool_name(&name) {
                return Err(syn::Error::new(
                    lit.span(),
                    format!("invalid tool name `{name}`: names must match ^[a-zA-Z0-9_-]{{1,64}}$"),
                ));
            }
            name
        }
        None => {
            let name = snake_case(&input.ident.to_string());
            if !is_valid_tool_name(&name) {
                return Err(syn::Error::new(
                    input.ident.span(),
                    format!(
                        "the default tool name `{name}` is not valid (^[a-zA-Z0-9_-]{{1,64}}$): \
                         set one with #[tool(name = \"...\")]"
                    ),
                ));
            }
            name
        }
    };

    let description = match &args.description {
        Some(lit) if lit.value().trim().is_empty() => {
            return Err(syn::Error::new(
                lit.span(),
                "the tool description must not be empty",
            ));
        }
        Some(lit) => lit.value().trim().to_owned(),
        None => doc_comment(&input.attrs).ok_or_else(|| {
            missing(
                "a tool needs a description: write a doc comment on the type or \
                 #[tool(description = \"...\")]",
            )
        })?,
    };

    let effect = match &args.effect {
        Some(lit) => match lit.value().as_str() {
            "read" => quote!(Read),
            "idempotent" => quote!(Idempotent),
            "write" => quote!(Write),
            other => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "unknown effect `{other}`: expected \"read\", \"idempotent\" or \"write\""
                    ),
                ));
            }
        },
        None => {
            return Err(missing(
                "a tool must say its effect: #[tool(effect = \"read\" | \"idempotent\" | \"write\")]",
            ));
        }
    };

    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_generics ::toolgate::ToolMeta for #ident #ty_generics #where_clause {
            const NAME: &'static str = #name;
            const DESCRIPTION: &'static str = #description;
            const EFFECT: ::toolgate::Effect = ::toolgate::Effect::#effect;
        }
    })
}

fn parse_args(attrs: &[Attribute]) -> syn::Result<ToolArgs> {
    let mut args = ToolArgs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("tool")) {
        if args.attr.is_some() {
            return Err(syn::Error::new_spanned(
                attr,
                "only one #[tool(...)] attribute is allowed",
            ));
        }
        args.attr = Some(attr.clone());
        attr.parse_nested_meta(|meta| {
            let slot = if meta.path.is_ident("name") {
                &mut args.name
            } else if meta.path.is_ident("description") {
                &mut args.description
            } else if meta.path.is_ident("effect") {
                &mut args.effect
            } else {
                return Err(
                    meta.error("unknown key: #[tool] takes `name`, `description` and `effect`")
                );
            };
            if slot.is_some() {
                return Err(meta.error("this key is given twice"));
            }
            *slot = Some(meta.value()?.parse::<LitStr>()?);
            Ok(())
        })?;
    }
    Ok(args)
}

/// The type's doc comment: lines joined, the one space after `///` dropped, trimmed.
fn doc_comment(attrs: &[Attribute]) -> Option<String> {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(s), ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .map(|line| {
            line.strip_prefix(' ')
                .unwrap_or(&line)
                .trim_end()
                .to_owned()
        })
        .collect();
    let doc = lines.join("\n").trim().to_owned();
    (!doc.is_empty()).then_some(doc)
}

/// `PayClaim` -> `pay_claim`, `HTTPFetch` -> `http_fetch`, `Sha256Sum` -> `sha256_sum`.
fn snake_case(ident: &str) -> String {
    let ident = ident.strip_prefix("r#").unwrap_or(ident);
    let chars: Vec<char> = ident.chars().collect();
    let mut out = String::with_capacity(ident.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev = i.checked_sub(1).map(|j| chars[j]);
            let next = chars.get(i + 1);
            let boundary = match prev {
                None | Some('_') => false,
                Some(p) if p.is_lowercase() || p.is_ascii_digit() => true,
                Some(p) => p.is_uppercase() && next.is_some_and(|n| n.is_lowercase()),
            };
            if boundary {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Mirrors `toolgate::is_valid_tool_name`, so a bad name fails at compile time.
fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::snake_case;

    #[test]
    fn snake_case_splits_words_and_acronyms() {
        assert_eq!(snake_case("PayClaim"), "pay_claim");
        assert_eq!(snake_case("Echo"), "echo");
        assert_eq!(snake_case("HTTPFetch"), "http_fetch");
        assert_eq!(snake_case("Sha256Sum"), "sha256_sum");
        assert_eq!(snake_case("already_snake"), "already_snake");
        assert_eq!(snake_case("IssueRefundV2"), "issue_refund_v2");
    }
}
