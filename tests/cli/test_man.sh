#!/usr/bin/env bash
# The man pages (help2man, target "man") document what the programs accept:
# every long option a program's --help mentions is in its man page, and the
# page has a NAME and a SYNOPSIS or DESCRIPTION section. No services.
#
#   LB_BIN      the programs (default: build/bin)
#   LB_MAN_DIR  the generated man pages (default: build/man)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${LB_BIN:-$repo/build/bin}
man_dir=${LB_MAN_DIR:-$repo/build/man}
programs=(projector replay lbread lbadmin loadgen)

failures=0
fail() {
    echo "FAIL $*" >&2
    failures=$((failures + 1))
}

for program in "${programs[@]}"; do
    page=$man_dir/$program.1
    if ! help=$("$bin/$program" --help 2>&1); then
        fail "$program: '$bin/$program --help' did not exit 0"
        continue
    fi
    if [[ ! -s $page ]]; then
        fail "$program: no man page, or an empty one, at $page"
        continue
    fi
    # The roff source as text: '\-' is a '-', font changes (\fB ... \fR) go.
    text=$(sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\f([A-Z][A-Z]//g' "$page")
    grep -qx '\.SH "*NAME"*' <<<"$text" || fail "$program: $page has no NAME section"
    grep -qE "^$program - ." <<<"$text" || fail "$program: the NAME section does not name $program"
    grep -qE '^\.SH "*(SYNOPSIS|DESCRIPTION)"*$' <<<"$text" ||
        fail "$program: $page has neither a SYNOPSIS nor a DESCRIPTION section"

    mapfile -t options < <(grep -oE -- '--[a-z][a-z0-9-]*' <<<"$help" | sort -u)
    if ((${#options[@]} == 0)); then
        fail "$program: --help mentions no long option"
        continue
    fi
    missing=()
    for option in "${options[@]}"; do
        grep -qE -- "(^|[^a-z0-9-])$option([^a-z0-9-]|\$)" <<<"$text" || missing+=("$option")
    done
    if ((${#missing[@]} > 0)); then
        fail "$program: in --help but not in $page: ${missing[*]} (stale man page? rebuild target man)"
        continue
    fi
    echo "ok $program: NAME, sections and all ${#options[@]} long options of --help in $page: ${options[*]}"
done

if ((failures > 0)); then
    echo "$failures man page check(s) failed" >&2
    exit 1
fi
echo "man pages of ${#programs[@]} programs checked"
