//! `wharf completion SHELL`: a completion script for the whole command line.
//!
//! Each subsystem parses its own arguments, so no single clap grammar exists; this one is
//! assembled from theirs: the container, pod and image commands at the top level, the
//! runtime and network commands under `runtime` and `net`.

use std::ffi::OsString;

use clap_complete::Shell;

/// The whole command line as one clap command.
fn whole() -> clap::Command {
    let mut cmd = clap::Command::new("wharf")
        .about("Wharf: a pod-native container engine")
        .version(env!("CARGO_PKG_VERSION"));
    for sub in crate::engine_cli::command()
        .get_subcommands()
        .chain(crate::image_cli::command().get_subcommands())
    {
        cmd = cmd.subcommand(sub.clone());
    }
    cmd.subcommand(crate::runtime_cli::command().name("runtime"))
        .subcommand(crate::net_cli::command().name("net"))
        .subcommand(
            clap::Command::new("completion")
                .about("Print a shell completion script")
                .arg(clap::Arg::new("shell").value_parser(["bash", "zsh", "fish"])),
        )
        .subcommand(clap::Command::new("version").about("Print the version"))
}

/// `wharf completion bash|zsh|fish` (argv without the program and subcommand).
pub fn main(rest: &[OsString]) -> i32 {
    let shell = match rest.first().and_then(|s| s.to_str()) {
        Some("bash") => Shell::Bash,
        Some("zsh") => Shell::Zsh,
        Some("fish") => Shell::Fish,
        other => {
            eprintln!(
                "wharf completion: expected a shell (bash, zsh or fish), got {:?}\n\
                 e.g. wharf completion bash > /etc/bash_completion.d/wharf",
                other.unwrap_or("nothing")
            );
            return 2;
        }
    };
    // Generated into memory first: clap_complete panics on a write error, and a reader
    // that stops early (`| head`) is not one.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut whole(), "wharf", &mut script);
    use std::io::Write;
    match std::io::stdout().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("wharf completion: write: {e}");
            1
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_assembled_grammar_is_consistent_and_complete() {
        let cmd = super::whole();
        cmd.clone().debug_assert();
        let names: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
        for want in [
            "run", "ps", "pod", "play", "pull", "images", "runtime", "net",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
    }
}
