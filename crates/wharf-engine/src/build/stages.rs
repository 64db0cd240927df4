//! Which stages a build needs: the target and, transitively, the stages it starts from,
//! copies from (`COPY --from`) or mounts (`RUN --mount=from=`). The others are skipped,
//! as BuildKit skips them, so a stage that `--target` does not reach costs nothing.

use std::collections::BTreeMap;

use wharf_build::{Dockerfile, Kind, Stage};

/// The other stages or images a stage's steps read, as written, with their lines: the
/// `--from` of COPY and ADD, and the `from=` of `RUN --mount`.
pub(super) fn copied_from(stage: &Stage) -> impl Iterator<Item = (usize, &str)> {
    stage.instructions.iter().flat_map(|ins| {
        let words: Vec<&str> = match &ins.kind {
            Kind::Copy { from: Some(f), .. } => vec![f.as_str()],
            Kind::Run { mounts, .. } => mounts
                .iter()
                .flat_map(|m| m.options.iter())
                .filter(|(k, _)| k == "from")
                .map(|(_, v)| v.as_str())
                .collect(),
            _ => Vec::new(),
        };
        words.into_iter().map(move |w| (ins.line, w))
    })
}

/// The stages `stage` refers to by name or index (references are expanded with the
/// global ARGs; one that does not expand names an image, not a stage).
pub(super) fn references(
    df: &Dockerfile,
    index: usize,
    global: &BTreeMap<String, Option<String>>,
) -> Vec<usize> {
    let stage_of = |w: &str| -> Option<usize> {
        let w = wharf_build::expand::expand(w, df.escape, &|n| global.get(n).cloned().flatten())
            .ok()?;
        super::stage_index(df, &w)
            .or_else(|| w.parse::<usize>().ok())
            .filter(|j| *j < index)
    };
    let stage = &df.stages[index];
    std::iter::once(stage.from.as_str())
        .chain(copied_from(stage).map(|(_, w)| w))
        .filter_map(stage_of)
        .collect()
}

/// For each stage, whether building `target` needs it.
pub(super) fn needed(
    df: &Dockerfile,
    target: usize,
    global: &BTreeMap<String, Option<String>>,
) -> Vec<bool> {
    let mut need = vec![false; df.stages.len()];
    need[target] = true;
    for i in (0..=target).rev() {
        if need[i] {
            for j in references(df, i, global) {
                need[j] = true;
            }
        }
    }
    need
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_target_reaches() {
        let df = wharf_build::parse(
            "ARG B=base\nFROM x AS base\nFROM y AS unused\nFROM $B AS mid\nCOPY --from=1 / /\n\
             FROM z AS other\nRUN --mount=from=mid,target=/m true\nFROM z\nCOPY --from=other / /\n",
            "Dockerfile",
        )
        .unwrap();
        let g: BTreeMap<String, Option<String>> =
            [("B".to_string(), Some("base".to_string()))].into();
        assert_eq!(needed(&df, 4, &g), [true, true, true, true, true]);
        assert_eq!(needed(&df, 3, &g), [true, true, true, true, false]);
        let df = wharf_build::parse("FROM x AS a\nFROM x AS b\nFROM a\n", "Dockerfile").unwrap();
        assert_eq!(needed(&df, 2, &BTreeMap::new()), [true, false, true]);
    }
}
