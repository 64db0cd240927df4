//! Lines of `/proc/<pid>/stat`, read the one safe way.

/// The fields of a `stat` line from field 3 (the state) on. The name (field 2) is the
/// process's own choice and may hold spaces and parentheses, so the fields start after its
/// last `)`; `None` for a line without one.
pub fn stat_fields(stat: &str) -> Option<std::str::SplitAsciiWhitespace<'_>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_ascii_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_start_after_the_names_last_parenthesis() {
        let line = "42 (a b) c)) S 1 42 42\n";
        let fields: Vec<&str> = stat_fields(line).unwrap().collect();
        assert_eq!(fields, ["S", "1", "42", "42"]);
        assert!(stat_fields("42 no name").is_none());
        assert_eq!(stat_fields("42 (x)").unwrap().count(), 0);
    }
}
