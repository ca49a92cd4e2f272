#!/usr/bin/env bash
# Submits launch/slurm_gpu.sbatch with the sizes and paths as options. See docs/gpu.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'USAGE'
usage: launch/slurm.sh --workdir=DIR [options] [-- MLMJAX_FLAGS...]

Submits launch/slurm_gpu.sbatch: one mlmjax process per GPU on every node (srun), run from
this repository's root in the current environment (which needs mlmjax with its [gpu] extra).

options (flag, or the environment variable in brackets):
  --workdir=DIR           run directory on a filesystem every node sees (MLMJAX_WORKDIR), required
  --config=CONFIG         a preset or a config file (MLMJAX_CONFIG; default configs/tiny.py)
  --nodes=N               nodes (MLMJAX_SLURM_NODES; default 2)
  --gpus-per-node=G       GPUs per node = processes per node (MLMJAX_SLURM_GPUS_PER_NODE; default 8)
  --partition=P           SLURM partition (MLMJAX_SLURM_PARTITION; default: the cluster's)
  --time=T                time limit, e.g. 24:00:00 (MLMJAX_SLURM_TIME; default: the script's)
  --job-name=NAME         job name (default mlmjax)
  --dry-run               print the sbatch command (prefixed "+ ") instead of running it
  -h, --help              this text
Flags after -- go to mlmjax, e.g. -- --config.train.steps=10000
USAGE
}

WORKDIR=${MLMJAX_WORKDIR:-}
CONFIG=${MLMJAX_CONFIG:-configs/tiny.py}
NODES=${MLMJAX_SLURM_NODES:-2}
GPUS=${MLMJAX_SLURM_GPUS_PER_NODE:-8}
PARTITION=${MLMJAX_SLURM_PARTITION:-}
TIME=${MLMJAX_SLURM_TIME:-}
JOB_NAME=mlmjax
EXTRA=()

while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    --workdir | --workdir=* | --config | --config=* | --nodes | --nodes=* | --gpus-per-node | \
      --gpus-per-node=* | --partition | --partition=* | --time | --time=* | --job-name | \
      --job-name=*)
      take_value "$@"
      shift "$SHIFT"
      case $OPT in
        --workdir) WORKDIR=$VAL ;;
        --config) CONFIG=$VAL ;;
        --nodes) NODES=$VAL ;;
        --gpus-per-node) GPUS=$VAL ;;
        --partition) PARTITION=$VAL ;;
        --time) TIME=$VAL ;;
        --job-name) JOB_NAME=$VAL ;;
      esac
      ;;
    *) die "unknown argument $1" ;;
  esac
done

[[ -n $WORKDIR ]] || die "--workdir is required (or set MLMJAX_WORKDIR): a directory every node sees"
[[ $NODES =~ ^[1-9][0-9]*$ ]] || die "--nodes needs a positive number, not '$NODES'"
[[ $GPUS =~ ^[1-9][0-9]*$ ]] || die "--gpus-per-node needs a positive number, not '$GPUS'"

args=("--job-name=$JOB_NAME" "--nodes=$NODES" "--ntasks-per-node=$GPUS" "--gpus-per-node=$GPUS")
[[ -z $PARTITION ]] || args+=("--partition=$PARTITION")
[[ -z $TIME ]] || args+=("--time=$TIME")
# --chdir: the job runs in the repository root, wherever this was called from.
run sbatch "${args[@]}" "--chdir=$MLMJAX_ROOT" "$MLMJAX_ROOT/launch/slurm_gpu.sbatch" \
  "--config=$CONFIG" "--workdir=$WORKDIR" ${EXTRA[@]+"${EXTRA[@]}"}
