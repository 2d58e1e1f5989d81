//! The caps a constraint is checked against before it is compiled: its bytes, its nesting, and
//! how deep its references chain (`$ref`s in a schema, rule and token names in a Lark grammar),
//! the last being what bounds the compiler's recursion.

use crate::lark_refs::rule_depth;
use crate::refs::{RefError, check_refs};
use crate::{GrammarError, Limits, Spec};

/// `spec` within `lim`, or the cap it passes (cyclic references with no base case are invalid).
pub(crate) fn check(spec: &Spec, lim: &Limits) -> Result<(), GrammarError> {
    let (size, depth) = (spec.size(), spec.depth());
    if size > lim.max_bytes {
        return Err(GrammarError::TooLarge(format!("{size} bytes; at most {} are allowed", lim.max_bytes)));
    }
    if depth > lim.max_depth {
        return Err(GrammarError::TooLarge(format!("nested {depth} deep; at most {} is allowed", lim.max_depth)));
    }
    let cap = lim.max_ref_depth;
    match spec {
        Spec::JsonSchema(v) => match check_refs(v, cap) {
            Ok(_) => Ok(()),
            Err(RefError::TooDeep(n)) => Err(GrammarError::TooLarge(format!(
                "$ref chain at least {n} deep (references followed in a row); at most {cap} is allowed"
            ))),
            Err(RefError::Cycle(chain)) => Err(GrammarError::Invalid(format!(
                "cyclic $ref with no base case: {} refers back to itself with no nested schema between",
                chain.join(" -> ")
            ))),
            Err(RefError::NoBaseCase) => Err(GrammarError::Invalid(
                "cyclic $ref with no base case: every value would need a value of the same schema inside it \
                 (a required property or a non-empty list referring back)"
                    .into(),
            )),
        },
        Spec::Lark(g) => match rule_depth(g, cap) {
            Ok(_) => Ok(()),
            Err(n) => Err(GrammarError::TooLarge(format!(
                "rule references chain at least {n} deep (each rule naming the next); at most {cap} is allowed"
            ))),
        },
        _ => Ok(()),
    }
}

/// Bytes a compiled constraint is taken to hold, for the cache's budget: compiles measured over a
/// 257-id vocabulary hold about 200 KiB plus 50 bytes per byte of schema, and 256 compiled 44 KB
/// schemas over a 150,000-id vocabulary held 3.1 GB (12 MB each); this takes the larger rate.
pub(crate) fn estimate(spec: &Spec) -> usize {
    256 * 1024 + 256 * spec.size()
}
