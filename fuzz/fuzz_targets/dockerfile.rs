//! Dockerfiles (`wharf_build::parse`): whatever the text, parsing ends in a Dockerfile or
//! an error, never a panic; a parsed one has every stage's and instruction's line within
//! the text; expanding any instruction's text (with nothing set) errs or succeeds but
//! never panics; and a COPY/ADD source resolves inside the context root or is refused.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use wharf_build::{Kind, context, expand};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(df) = wharf_build::parse(text, "Dockerfile") else {
        return;
    };
    let lines = text.split('\n').count();
    let unset = |_: &str| None;
    let root = Path::new("/ctx");
    for stage in &df.stages {
        assert!((1..=lines).contains(&stage.line), "stage line {} of {lines}", stage.line);
        let _ = expand::expand(&stage.from, df.escape, &unset);
        for ins in &stage.instructions {
            assert!((1..=lines).contains(&ins.line), "line {} of {lines}", ins.line);
            let _ = expand::expand(&ins.text, df.escape, &unset);
            let _ = expand::expand_words(&ins.text, df.escape, &unset);
            match &ins.kind {
                Kind::Copy { sources, .. } => {
                    for s in sources {
                        if let Ok(p) = context::resolve(root, s) {
                            assert!(p.starts_with(root), "{s:?} resolved to {p:?}");
                        }
                    }
                }
                Kind::Env(pairs) | Kind::Label(pairs) => {
                    for (_, v) in pairs {
                        let _ = expand::expand(v, df.escape, &unset);
                    }
                }
                _ => {}
            }
        }
    }
});
