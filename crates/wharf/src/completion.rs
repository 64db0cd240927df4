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
    match shell {
        Shell::Bash => script.extend_from_slice(BASH_NAMES.as_bytes()),
        Shell::Fish => script.extend_from_slice(FISH_NAMES.as_bytes()),
        Shell::Zsh => script.extend_from_slice(ZSH_NAMES.as_bytes()),
        _ => {}
    }
    use std::io::Write;
    match std::io::stdout().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("wharf completion: write: {e}");
            1
        }
        _ => 0,
    }
}

/// Commands whose arguments are containers (or pods), and those that take images (the
/// scripts below spell them out, as `concat!` takes literals only).
#[cfg(test)]
const CONTAINER_CMDS: &str = "attach commit cp diff exec export inspect kill logs pause port \
rename restart rm start stats stop top unpause update wait";
#[cfg(test)]
const IMAGE_CMDS: &str = "create history push rmi run save tag";

/// bash: the generated function first, then names for the arguments that are names.
const BASH_NAMES: &str = concat!(
    r#"
_wharf_container_names() {
    command wharf ps -a --format '{{.Names}}' 2>/dev/null
    command wharf pod ls --format '{{.Name}}' 2>/dev/null
}
_wharf_image_names() {
    command wharf images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | grep -v '<none>'
}
_wharf_with_names() {
    _wharf "$@"
    local cur="${COMP_WORDS[COMP_CWORD]}" sub="" i
    [[ "$cur" == -* ]] && return 0
    for ((i = 1; i < COMP_CWORD; i++)); do
        [[ "${COMP_WORDS[i]}" == -* ]] && continue
        sub="${COMP_WORDS[i]}"
        break
    done
    case " "#,
    "attach commit cp diff exec export inspect kill logs pause port rename restart rm start stats stop top unpause update wait",
    r#" " in
        *" $sub "*) COMPREPLY+=($(compgen -W "$(_wharf_container_names)" -- "$cur")) ;;
    esac
    case " "#,
    "create history push rmi run save tag",
    r#" " in
        *" $sub "*) COMPREPLY+=($(compgen -W "$(_wharf_image_names)" -- "$cur")) ;;
    esac
    return 0
}
complete -F _wharf_with_names -o bashdefault -o default wharf
"#
);

/// fish: names as candidates after the commands that take them.
const FISH_NAMES: &str = concat!(
    r#"
complete -c wharf -n '__fish_seen_subcommand_from "#,
    "attach commit cp diff exec export inspect kill logs pause port rename restart rm start stats stop top unpause update wait",
    r#"' -f -a '(command wharf ps -a --format "{{.Names}}" 2>/dev/null; command wharf pod ls --format "{{.Name}}" 2>/dev/null)'
complete -c wharf -n '__fish_seen_subcommand_from "#,
    "create history push rmi run save tag",
    r#"' -f -a '(command wharf images --format "{{.Repository}}:{{.Tag}}" 2>/dev/null)'
"#
);

/// zsh: the generated function first, then names where a command takes them.
const ZSH_NAMES: &str = concat!(
    r#"
_wharf_with_names() {
    _wharf "$@"
    [[ ${words[CURRENT]} == -* ]] && return 0
    local sub=${words[2]}
    case " "#,
    "attach commit cp diff exec export inspect kill logs pause port rename restart rm start stats stop top unpause update wait",
    r#" " in
        *" $sub "*) compadd -- ${(f)"$(command wharf ps -a --format '{{.Names}}' 2>/dev/null; command wharf pod ls --format '{{.Name}}' 2>/dev/null)"} ;;
    esac
    case " "#,
    "create history push rmi run save tag",
    r#" " in
        *" $sub "*) compadd -- ${(f)"$(command wharf images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | grep -v '<none>')"} ;;
    esac
    return 0
}
compdef _wharf_with_names wharf
"#
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_lists_are_the_commands_they_name() {
        assert!(BASH_NAMES.contains(CONTAINER_CMDS) && BASH_NAMES.contains(IMAGE_CMDS));
        assert!(FISH_NAMES.contains(CONTAINER_CMDS) && FISH_NAMES.contains(IMAGE_CMDS));
        assert!(ZSH_NAMES.contains(CONTAINER_CMDS) && ZSH_NAMES.contains(IMAGE_CMDS));
    }
}
