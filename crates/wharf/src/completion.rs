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
    // The grammar knows commands and flags; names of containers, pods and images come
    // from the engine, asked when completing.
    let names = match shell {
        Shell::Bash => BASH_NAMES,
        Shell::Fish => FISH_NAMES,
        Shell::Zsh => ZSH_NAMES,
        _ => "",
    };
    script.extend_from_slice(names_script(names, shell).as_bytes());
    use std::io::Write;
    match std::io::stdout().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("wharf completion: write: {e}");
            1
        }
        _ => 0,
    }
}

/// Commands whose arguments are containers (or pods), and those that take images.
const CONTAINER_CMDS: &str = "attach commit cp diff exec export inspect kill logs pause port \
rename restart rm start stats stop top unpause update wait";
const IMAGE_CMDS: &str = "create history push rmi run save tag";
/// The shell commands that list those names (each shell's script runs them).
const CONTAINER_NAMES: &str = "command wharf ps -a --format '{{.Names}}' 2>/dev/null; \
command wharf pod ls --format '{{.Name}}' 2>/dev/null";
const IMAGE_NAMES: &str =
    "command wharf images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | grep -v '<none>'";

/// bash: the generated function first, then names for the arguments that are names.
const BASH_NAMES: &str = r#"
_wharf_with_names() {
    _wharf "$@"
    local cur="${COMP_WORDS[COMP_CWORD]}" sub="" i
    [[ "$cur" == -* ]] && return 0
    for ((i = 1; i < COMP_CWORD; i++)); do
        [[ "${COMP_WORDS[i]}" == -* ]] && continue
        sub="${COMP_WORDS[i]}"
        break
    done
    case " @CONTAINER_CMDS@ " in
        *" $sub "*) COMPREPLY+=($(compgen -W "$(@CONTAINER_NAMES@)" -- "$cur")) ;;
    esac
    case " @IMAGE_CMDS@ " in
        *" $sub "*) COMPREPLY+=($(compgen -W "$(@IMAGE_NAMES@)" -- "$cur")) ;;
    esac
    return 0
}
complete -F _wharf_with_names -o bashdefault -o default wharf
"#;

/// zsh: the generated function first, then names where a command takes them.
const ZSH_NAMES: &str = r#"
_wharf_with_names() {
    _wharf "$@"
    [[ ${words[CURRENT]} == -* ]] && return 0
    local sub=${words[2]}
    case " @CONTAINER_CMDS@ " in
        *" $sub "*) compadd -- ${(f)"$(@CONTAINER_NAMES@)"} ;;
    esac
    case " @IMAGE_CMDS@ " in
        *" $sub "*) compadd -- ${(f)"$(@IMAGE_NAMES@)"} ;;
    esac
    return 0
}
compdef _wharf_with_names wharf
"#;

/// fish: names as candidates after the commands that take them.
const FISH_NAMES: &str = r#"
complete -c wharf -n '__fish_seen_subcommand_from @CONTAINER_CMDS@' -f -a '(@CONTAINER_NAMES@)'
complete -c wharf -n '__fish_seen_subcommand_from @IMAGE_CMDS@' -f -a '(@IMAGE_NAMES@)'
"#;

/// A script with the command lists and name listings filled in (fish quotes them its
/// way: the listing sits inside a single-quoted argument).
fn names_script(template: &str, shell: Shell) -> String {
    let quote = |cmd: &str| match shell {
        Shell::Fish => cmd.replace('\'', "\""),
        _ => cmd.to_string(),
    };
    template
        .replace("@CONTAINER_CMDS@", CONTAINER_CMDS)
        .replace("@IMAGE_CMDS@", IMAGE_CMDS)
        .replace("@CONTAINER_NAMES@", &quote(CONTAINER_NAMES))
        .replace("@IMAGE_NAMES@", &quote(IMAGE_NAMES))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_names_the_commands_and_lists_the_names() {
        for (t, shell) in [
            (BASH_NAMES, Shell::Bash),
            (ZSH_NAMES, Shell::Zsh),
            (FISH_NAMES, Shell::Fish),
        ] {
            let s = names_script(t, shell);
            assert!(s.contains(CONTAINER_CMDS) && s.contains(IMAGE_CMDS), "{s}");
            assert!(!s.contains("@CONTAINER") && !s.contains("@IMAGE"), "{s}");
            assert!(s.contains("command wharf ps -a --format"), "{s}");
        }
        // fish: the listings inside single quotes use double ones.
        let fish = names_script(FISH_NAMES, Shell::Fish);
        assert!(
            fish.contains(r#"-a '(command wharf ps -a --format "{{.Names}}""#),
            "{fish}"
        );
    }
}
