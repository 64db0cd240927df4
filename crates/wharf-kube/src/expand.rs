//! Kubernetes' `$(VAR)` references in env values, command, args and subPathExpr.
//!
//! The rules are the API's: `$(NAME)` becomes the variable's value when NAME is defined
//! (earlier in the container's env for env values, anywhere in it for command and args),
//! and stays as written when it is not; `$$` is an escaped `$`; any other `$` is literal.
//! Substituted values are not expanded again.

/// Expand `$(NAME)` references in `input` with `lookup`.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('(') {
            match tail.find(')') {
                Some(end) => {
                    let name = &tail[..end];
                    match lookup(name) {
                        Some(v) => out.push_str(&v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &tail[end + 1..];
                }
                None => {
                    // Unterminated: literal.
                    out.push_str("$(");
                    rest = tail;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "A" => Some("alpha".into()),
            "B" => Some("$(A)".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn references_expand_as_in_kubernetes() {
        assert_eq!(expand("$(A)-x", env), "alpha-x");
        assert_eq!(expand("pre $(A)$(A) post", env), "pre alphaalpha post");
        assert_eq!(expand("[$(EMPTY)]", env), "[]");
        // Undefined: kept as written.
        assert_eq!(expand("$(NOPE) and $(A)", env), "$(NOPE) and alpha");
        // Escapes and lone dollars.
        assert_eq!(expand("$$(A)", env), "$(A)");
        assert_eq!(expand("$$$(A)", env), "$alpha");
        assert_eq!(expand("cost: $5 $", env), "cost: $5 $");
        assert_eq!(expand("$(A", env), "$(A");
        assert_eq!(expand("$()", env), "$()");
        // No second round: B's value is not expanded again.
        assert_eq!(expand("$(B)", env), "$(A)");
        assert_eq!(expand("ünï $(A) cödé", env), "ünï alpha cödé");
    }
}
