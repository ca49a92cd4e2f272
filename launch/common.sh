# Shared helpers for the launch/ scripts (sourced, not run).
#
#   run CMD ARGS...   prints "+ CMD ARGS..." (shell-quoted, one line), then runs it; with
#                     DRY_RUN=1 it prints the line on stdout and runs nothing.
#   die MESSAGE       "error: MESSAGE" on stderr, exit status 2.
# shellcheck shell=bash
# shellcheck disable=SC2034  # DRY_RUN MLMJAX_ROOT OPT VAL SHIFT: for the scripts sourcing this

DRY_RUN=${DRY_RUN:-0}
# The repository this launch/ folder belongs to.
MLMJAX_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() {
  echo "error: $*" >&2
  echo "(run with -h for help)" >&2
  exit 2
}

warn() {
  echo "warning: $*" >&2
}

# One word as the shell would need it: as is if it is plain, else in single quotes (double
# quotes if it holds single quotes and nothing double quotes expand). A --flag=value word keeps
# --flag= outside the quotes, for legibility.
quote() {
  local word=$1 safe='^[A-Za-z0-9_./:=,@%+~-]+$'
  if [[ -n $word && $word =~ $safe && $word != '~'* && $word != *=~* ]]; then
    printf '%s' "$word"
  elif [[ $word =~ ^(--[A-Za-z0-9_.-]+=)(.*)$ ]]; then
    printf '%s' "${BASH_REMATCH[1]}"
    quote "${BASH_REMATCH[2]}"
  elif [[ $word == *\'* && $word != *[\"\$\`\\!]* ]]; then
    printf '"%s"' "$word"  # reads better than '...'\''...'
  else
    printf "'%s'" "${word//\'/\'\\\'\'}"
  fi
}

# The words, each quoted, separated by single spaces.
quote_all() {
  local out="" word
  for word in "$@"; do
    out+="${out:+ }$(quote "$word")"
  done
  printf '%s' "$out"
}

run() {
  local line
  line="+ $(quote_all "$@")"
  if [[ $DRY_RUN == 1 ]]; then
    echo "$line"
  else
    echo "$line" >&2
    "$@"
  fi
}

# Parses one option word for the option loops of the scripts: sets OPT and VAL and how many
# words it used (SHIFT), for both "--opt=value" and "--opt value". Options without a value
# call it with only the word.
take_value() {
  OPT=${1%%=*}
  if [[ $1 == *=* ]]; then
    VAL=${1#*=}
    SHIFT=1
  elif [[ $# -ge 2 ]]; then
    VAL=$2
    SHIFT=2
  else
    die "$OPT needs a value"
  fi
}
