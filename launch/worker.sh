#!/usr/bin/env bash
# Runs ON each TPU VM worker: launch/tpu.sh calls it over ssh on all of them, from the copy of
# mlmjax that `tpu.sh install` put there. Works by hand on any single machine too.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'USAGE'
usage: launch/worker.sh [--dry-run] ACTION

  setup            a Python 3.12 venv (made with uv) with this tree installed editable, with
                   its [tpu,gcs] extras: jax's libtpu and the gs:// bucket support
  train FLAGS...   python -m mlmjax.main FLAGS..., detached, appending to the log; refuses
                   to start a second run
  stop             SIGTERM to that run: mlmjax saves a checkpoint and exits 0
  logs [--lines=N] [--follow]

--dry-run (before or right after the action) prints each command, prefixed "+ ", instead of
running it.

environment: MLMJAX_VENV (default ~/mlmjax-venv), MLMJAX_LOG_DIR (default ~/mlmjax-logs,
holding train.log and train.pid), MLMJAX_EXTRAS (default tpu,gcs: the extras setup installs)
USAGE
}

ROOT=$MLMJAX_ROOT
VENV=${MLMJAX_VENV:-$HOME/mlmjax-venv}
LOG_DIR=${MLMJAX_LOG_DIR:-$HOME/mlmjax-logs}
LOG=$LOG_DIR/train.log
PID_FILE=$LOG_DIR/train.pid

running_pid() {  # the pid of a live training run started here, or nothing
  local pid
  [[ -f $PID_FILE ]] || return 0
  pid=$(<"$PID_FILE")
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    echo "$pid"
  fi
}

setup() {
  # TPU VM images ship Python 3.10; uv provides Python 3.12 in a venv (the newest jax and
  # libtpu need 3.12 or newer).
  local uv=$HOME/.local/bin/uv
  if [[ ! -x $uv ]]; then
    run sh -c 'curl -LsSf https://astral.sh/uv/install.sh | sh'
  fi
  run "$uv" venv --quiet --allow-existing --python=3.12 "$VENV"
  # [tpu]: the newest jax mlmjax admits, with its libtpu. [gcs]: always, not only when the
  # workdir is a bucket: setup runs before any `train` names a workdir or data, a bucket is
  # the workdir the docs advise for pods, and without it a gs:// path fails only at train
  # time, on every worker (the extra is two small client libraries).
  run "$uv" pip install --quiet --python="$VENV/bin/python" \
    --editable="${ROOT}[${MLMJAX_EXTRAS:-tpu,gcs}]"
  run "$VENV/bin/python" -c 'import jax, mlmjax; print("mlmjax ready: jax", jax.__version__)'
}

train() {
  local pid
  pid=$(running_pid)
  if [[ -n $pid ]]; then
    echo "error: mlmjax is already training on $(hostname) (pid $pid); stop it first" >&2
    exit 1
  fi
  # Detached from the ssh session; relative --config paths are relative to the tree.
  cd "$ROOT"
  if [[ $DRY_RUN == 1 ]]; then
    echo "+ cd $(quote "$ROOT")"
    echo "+ nohup $(quote_all "$VENV/bin/python" -m mlmjax.main "$@") >>$(quote "$LOG") 2>&1 </dev/null &"
    return 0
  fi
  mkdir -p "$LOG_DIR"
  echo "==== $(date -u +%FT%TZ) start: python -m mlmjax.main $*" >>"$LOG"
  nohup "$VENV/bin/python" -m mlmjax.main "$@" >>"$LOG" 2>&1 </dev/null &
  echo $! >"$PID_FILE"
  echo "mlmjax started on $(hostname): pid $!, log $LOG"
}

stop() {
  local pid
  pid=$(running_pid)
  if [[ -z $pid ]]; then
    echo "mlmjax is not running on $(hostname)"
    return 0
  fi
  # What a preemption sends: every process agrees on a step, saves it and exits.
  run kill -TERM "$pid"
  [[ $DRY_RUN == 0 ]] || return 0
  echo "sent SIGTERM to mlmjax on $(hostname) (pid $pid); it saves a checkpoint, then exits"
}

logs() {
  local lines=100 follow=()
  while [[ $# -gt 0 ]]; do
    case $1 in
      --lines=*) lines=${1#*=} ;;
      --follow) follow=(-F) ;;
      *) echo "error: unknown option $1" >&2; exit 2 ;;
    esac
    shift
  done
  if [[ ! -f $LOG && ${#follow[@]} -eq 0 ]]; then
    echo "no log yet on $(hostname) ($LOG)"
    return 0
  fi
  run tail -n "$lines" ${follow[@]+"${follow[@]}"} "$LOG"
}

if [[ ${1:-} == --dry-run ]]; then
  DRY_RUN=1
  shift
fi
case ${1:-} in
  setup | train | stop | logs)
    action=$1
    shift
    if [[ ${1:-} == --dry-run ]]; then
      DRY_RUN=1
      shift
    fi
    "$action" "$@"
    ;;
  -h | --help) usage ;;
  *) usage >&2; exit 2 ;;
esac
