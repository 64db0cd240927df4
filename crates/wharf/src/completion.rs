//! `wharf completion SHELL`: a completion script for the whole command line, generated from
//! its one grammar ([`crate::cli::command`]).

use clap_complete::Shell;

/// `wharf completion bash|zsh|fish` (the shell is checked by the grammar).
pub fn main(shell: &str) -> i32 {
    let shell = match shell {
        "zsh" => Shell::Zsh,
        "fish" => Shell::Fish,
        _ => Shell::Bash,
    };
    // Generated into memory first: clap_complete panics on a write error, and a reader
    // that stops early (`| head`) is not one.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut crate::cli::command(), "wharf", &mut script);
    use std::io::Write;
    match std::io::stdout().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("wharf completion: write: {e}");
            1
        }
        _ => 0,
    }
}
