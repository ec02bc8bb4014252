# shellcheck shell=bash
# Bash completion of the long options of projector, replay, lbread, lbadmin
# and loadgen, read from the program's own --help as it completes (so they
# are those of the version installed). Anything else completes as a file.
# cmake --install puts a copy in share/bash-completion/completions/ under
# each installed program's name; or source this file.
_lb_complete() {
    local cur=${COMP_WORDS[COMP_CWORD]}
    COMPREPLY=()
    [[ $cur == -* ]] || return 0
    local options
    options=$("$1" --help 2>/dev/null | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u)
    mapfile -t COMPREPLY < <(compgen -W "$options" -- "$cur")
}
complete -o default -F _lb_complete projector replay lbread lbadmin loadgen
