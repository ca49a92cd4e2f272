#!/usr/bin/env bash
# mlmjax on a Cloud TPU VM or pod slice, one gcloud command per step. See docs/tpu.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'USAGE'
usage: launch/tpu.sh ACTION --name=NAME --zone=ZONE [options] [-- MLMJAX_FLAGS...]

actions (every one runs gcloud; --dry-run prints the commands instead):
  create    create the TPU VM / pod slice; with --queued, request it as a queued resource
            (Google's route to v5e, v5p and v6e capacity): it is made when capacity frees up
  status    describe the TPU VM, or with --queued the queued resource (its state:
            WAITING_FOR_RESOURCES, PROVISIONING, ACTIVE, ...)
  install   copy mlmjax to every worker and set up Python 3.12 + mlmjax[tpu,gcs] there
  train     start `python -m mlmjax.main` detached on every worker (log per worker);
            flags after -- go to mlmjax, e.g. -- --config.train.steps=10000
  logs      tail the training log of one worker (--worker, default 0)
  stop      SIGTERM the run on every worker: it saves a checkpoint and exits (as on
            preemption); `train` again resumes from the workdir
  delete    delete the TPU VM / pod slice; with --queued, the queued resource and its TPU VM

options (flag, or the environment variable in brackets):
  --name=NAME               TPU name (MLMJAX_TPU_NAME), required; with --queued also the
                            queued resource's name
  --zone=ZONE               e.g. us-central2-b (MLMJAX_TPU_ZONE), required
  --project=PROJECT         GCP project (MLMJAX_TPU_PROJECT); default: gcloud's
  --accelerator-type=TYPE   create: v4-32, v5p-8, v5litepod-16, v6e-8, ...
                            (MLMJAX_TPU_ACCELERATOR_TYPE; default v4-8)
  --version=VERSION         create: TPU software version (MLMJAX_TPU_VERSION); default by the
                            accelerator type: v2, v3, v4: tpu-ubuntu2204-base, v5p:
                            v2-alpha-tpuv5, v5litepod (v5e): v2-alpha-tpuv5-lite, v6e:
                            v2-alpha-tpuv6e (https://cloud.google.com/tpu/docs/runtimes)
  --queued                  create, status, delete: a queued resource (MLMJAX_TPU_QUEUED=1)
  --spot                    create: a Spot TPU (cheaper, preemptible)
  --reserved                create --queued: in your project's reserved capacity
  --reservation=NAME        create --queued: in that reservation (runs `gcloud alpha`, where
                            this flag is)
  --repo=URL                install: git clone URL on the workers (MLMJAX_REPO); default: copy
                            this checkout's commit --ref with git archive + scp
  --ref=REF                 install: commit, branch or tag to install (MLMJAX_REF; default HEAD)
  --config=CONFIG           train: a preset (tiny, bert:base, ...) or a config file in the
                            tree (MLMJAX_CONFIG; default configs/tiny.py)
  --workdir=DIR             train: run directory, the same for every worker: a bucket
                            (gs://...) or a shared filesystem for pods (MLMJAX_WORKDIR),
                            required for train
  --worker=W                all, 0, 1, ... (default: all; logs: 0)
  --lines=N                 logs: lines of history (default 100)
  --no-follow               logs: print and exit instead of following
  --yes                     delete: do not ask for confirmation
  --dry-run                 print each command (prefixed "+ ") instead of running it
  -h, --help                this text
USAGE
}

# Google's TPU software version for an accelerator type, by its family ("TPU software
# versions", https://cloud.google.com/tpu/docs/runtimes); nothing for a family not listed.
runtime_version() {
  case $1 in
    v2-* | v3-* | v4-*) echo tpu-ubuntu2204-base ;;
    v5p-*) echo v2-alpha-tpuv5 ;;
    v5litepod-*) echo v2-alpha-tpuv5-lite ;;
    v6e-*) echo v2-alpha-tpuv6e ;;
  esac
}

ACTION=""
NAME=${MLMJAX_TPU_NAME:-}
ZONE=${MLMJAX_TPU_ZONE:-}
PROJECT=${MLMJAX_TPU_PROJECT:-}
ACCELERATOR_TYPE=${MLMJAX_TPU_ACCELERATOR_TYPE:-v4-8}
VERSION=${MLMJAX_TPU_VERSION:-}
REPO=${MLMJAX_REPO:-}
REF=${MLMJAX_REF:-HEAD}
CONFIG=${MLMJAX_CONFIG:-configs/tiny.py}
WORKDIR=${MLMJAX_WORKDIR:-}
WORKER=""
LINES=100
FOLLOW=1
QUEUED=${MLMJAX_TPU_QUEUED:-0}
SPOT=0
RESERVED=0
RESERVATION=""
YES=0
EXTRA=()

while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --queued) QUEUED=1; shift ;;
    --spot) SPOT=1; shift ;;
    --reserved) RESERVED=1; shift ;;
    --yes) YES=1; shift ;;
    --no-follow) FOLLOW=0; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    --name | --name=* | --zone | --zone=* | --project | --project=* | --accelerator-type | \
      --accelerator-type=* | --version | --version=* | --repo | --repo=* | --ref | --ref=* | \
      --config | --config=* | --workdir | --workdir=* | --worker | --worker=* | --lines | \
      --lines=* | --reservation | --reservation=*)
      take_value "$@"
      shift "$SHIFT"
      case $OPT in
        --name) NAME=$VAL ;;
        --zone) ZONE=$VAL ;;
        --project) PROJECT=$VAL ;;
        --accelerator-type) ACCELERATOR_TYPE=$VAL ;;
        --version) VERSION=$VAL ;;
        --repo) REPO=$VAL ;;
        --ref) REF=$VAL ;;
        --config) CONFIG=$VAL ;;
        --workdir) WORKDIR=$VAL ;;
        --worker) WORKER=$VAL ;;
        --lines) LINES=$VAL ;;
        --reservation) RESERVATION=$VAL ;;
      esac
      ;;
    -*) die "unknown option $1" ;;
    *)
      [[ -z $ACTION ]] || die "one action at a time (got '$ACTION' and '$1')"
      ACTION=$1
      shift
      ;;
  esac
done

ACTIONS="create, status, install, train, logs, stop or delete"
case $ACTION in
  create | status | install | train | logs | stop | delete) ;;
  "") die "no action given: $ACTIONS" ;;
  *) die "unknown action '$ACTION': $ACTIONS" ;;
esac
[[ -n $NAME ]] || die "--name is required (or set MLMJAX_TPU_NAME)"
[[ -n $ZONE ]] || die "--zone is required (or set MLMJAX_TPU_ZONE)"
[[ $QUEUED == [01] ]] || die "MLMJAX_TPU_QUEUED is 0 or 1, not '$QUEUED'"
if [[ ${#EXTRA[@]} -gt 0 && $ACTION != train ]]; then
  die "flags after -- are for 'train' only"
fi

if [[ $ACTION == create ]]; then
  if [[ -z $VERSION ]]; then
    VERSION=$(runtime_version "$ACCELERATOR_TYPE")
    [[ -n $VERSION ]] || die "no TPU software version known for --accelerator-type=$ACCELERATOR_TYPE" \
      "(known: v2-N, v3-N, v4-N, v5p-N, v5litepod-N, v6e-N): pass --version=VERSION" \
      "(see https://cloud.google.com/tpu/docs/runtimes)"
  fi
  if [[ $SPOT == 1 && ( $RESERVED == 1 || -n $RESERVATION ) ]]; then
    die "--spot and --reserved/--reservation exclude each other"
  fi
  if [[ $RESERVED == 1 && -n $RESERVATION ]]; then
    die "--reserved (any reservation) or --reservation=NAME (that one), not both"
  fi
  if [[ $QUEUED == 0 && ( $RESERVED == 1 || -n $RESERVATION ) ]]; then
    die "--reserved and --reservation are for a queued resource: add --queued"
  fi
fi

TPU=(gcloud compute tpus tpu-vm)
QUEUED_RESOURCES=(gcloud compute tpus queued-resources)
WHERE=("--zone=$ZONE")
[[ -z $PROJECT ]] || WHERE+=("--project=$PROJECT")

# Runs COMMAND (a shell command line) on the workers, from their home directory.
on_workers() {
  run "${TPU[@]}" ssh "$NAME" "${WHERE[@]}" "--worker=${WORKER:-all}" "--command=$1"
}

# The worker-side script, in the tree that `install` put in ~/mlmjax.
WORKER_SH="bash mlmjax/launch/worker.sh"

case $ACTION in
  create)
    if [[ $QUEUED == 0 ]]; then
      args=("--accelerator-type=$ACCELERATOR_TYPE" "--version=$VERSION")
      [[ $SPOT == 0 ]] || args+=(--spot)
      run "${TPU[@]}" create "$NAME" "${WHERE[@]}" "${args[@]}"
    else
      # The queued resource and the TPU VM it makes share the name, so the other actions
      # reach the TPU VM by --name once the request is ACTIVE.
      args=("--node-id=$NAME" "--accelerator-type=$ACCELERATOR_TYPE" "--runtime-version=$VERSION")
      [[ $SPOT == 0 ]] || args+=(--spot)
      [[ $RESERVED == 0 ]] || args+=(--reserved)
      if [[ -n $RESERVATION ]]; then
        QUEUED_RESOURCES=(gcloud alpha compute tpus queued-resources)  # only alpha has --reservation
        args+=("--reservation=$RESERVATION")
      fi
      run "${QUEUED_RESOURCES[@]}" create "$NAME" "${WHERE[@]}" "${args[@]}"
    fi
    ;;
  status)
    if [[ $QUEUED == 0 ]]; then
      run "${TPU[@]}" describe "$NAME" "${WHERE[@]}"
    else
      run "${QUEUED_RESOURCES[@]}" describe "$NAME" "${WHERE[@]}"
    fi
    ;;
  install)
    if [[ -n $REPO ]]; then
      fetch="{ [ -d mlmjax/.git ] || git clone --quiet $(quote "$REPO") mlmjax; }"
      fetch+=" && git -C mlmjax fetch --quiet origin $(quote "$REF")"
      fetch+=" && git -C mlmjax checkout --quiet --detach FETCH_HEAD"
    else
      # A commit, not the working tree: every worker gets exactly the same code.
      if [[ -n $(git -C "$MLMJAX_ROOT" status --porcelain --untracked-files=no 2>/dev/null) ]]
      then
        warn "uncommitted changes in $MLMJAX_ROOT are not installed (it copies $REF)"
      fi
      tarball=${TMPDIR:-/tmp}/mlmjax-$NAME.tar.gz
      run git -C "$MLMJAX_ROOT" archive --format=tar.gz "--output=$tarball" "$REF"
      run "${TPU[@]}" scp "$tarball" "$NAME:mlmjax.tar.gz" "${WHERE[@]}" "--worker=${WORKER:-all}"
      run rm -f "$tarball"
      fetch="mkdir -p mlmjax && tar -xzf mlmjax.tar.gz -C mlmjax && rm mlmjax.tar.gz"
    fi
    on_workers "$fetch && $WORKER_SH setup"
    ;;
  train)
    [[ -n $WORKDIR ]] || die "train needs --workdir (or MLMJAX_WORKDIR): the same directory on every worker"
    on_workers "$WORKER_SH train $(quote_all "--config=$CONFIG" "--workdir=$WORKDIR" ${EXTRA[@]+"${EXTRA[@]}"})"
    ;;
  logs)
    [[ $LINES =~ ^[0-9]+$ ]] || die "--lines needs a number, not '$LINES'"
    follow=""
    [[ $FOLLOW == 0 ]] || follow=" --follow"
    WORKER=${WORKER:-0}
    on_workers "$WORKER_SH logs --lines=$LINES$follow"
    ;;
  stop)
    on_workers "$WORKER_SH stop"
    ;;
  delete)
    args=()
    [[ $YES == 0 ]] || args+=(--quiet)
    if [[ $QUEUED == 0 ]]; then
      run "${TPU[@]}" delete "$NAME" "${WHERE[@]}" ${args[@]+"${args[@]}"}
    else
      # --force: delete its TPU VM first (else only a request without a live TPU VM goes)
      run "${QUEUED_RESOURCES[@]}" delete "$NAME" "${WHERE[@]}" --force ${args[@]+"${args[@]}"}
    fi
    ;;
esac
