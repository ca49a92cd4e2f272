"""launch/gke.py: the JobSet manifests it writes, parsed back and checked for one slice and for
several; the xpk command; `--apply --dry-run` runs nothing; one-line errors. And mlmjax's
multi-process start-up under the environment GKE and the manifest give a pod, simulated.
launch/Dockerfile, the image these run, read statically (no Docker engine here)."""

import os
import re
import shlex
import subprocess
import sys

import yaml

from conftest import REPO
from mlmjax.parallel import distributed
from mlmjax.parallel import plugins

GKE = os.path.join(REPO, "launch", "gke.py")
ARGS = ["--name=bert", "--image=registry/mlmjax:1", "--workdir=gs://bucket/runs/bert",
        "--config=configs/bert.py:base"]


def _run(*args, tmp_path=None):
  env = dict(os.environ)
  if tmp_path is not None:  # a kubectl/xpk that fails loudly comes first on PATH
    for tool in ("kubectl", "xpk"):
      fake = tmp_path / tool
      fake.write_text("#!/bin/bash\necho FAKE CALLED >&2\nexit 99\n")
      fake.chmod(0o755)
    env["PATH"] = f"{tmp_path}{os.pathsep}{env['PATH']}"
  return subprocess.run([sys.executable, GKE, *args], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=60)


def _pod(manifest):
  [job] = manifest["spec"]["replicatedJobs"]
  return job, job["template"]["spec"], job["template"]["spec"]["template"]["spec"]


def test_one_v5p_128_slice():
  proc = _run("jobset", "--tpu-type=v5p-128", *ARGS, "--", "--config.train.steps=100000")
  assert proc.returncode == 0, proc.stderr
  manifest = yaml.safe_load(proc.stdout)
  assert (manifest["apiVersion"], manifest["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
  assert manifest["metadata"]["annotations"] == {
      "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
  job, spec, pod = _pod(manifest)
  assert job["replicas"] == 1  # one slice
  assert spec["parallelism"] == spec["completions"] == 16  # 64 chips, 4 per TPU VM
  assert spec["backoffLimit"] == 0 and manifest["spec"]["failurePolicy"]["maxRestarts"] == 4
  assert pod["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
                                 "cloud.google.com/gke-tpu-topology": "4x4x4"}
  assert pod["hostNetwork"] is True
  [container] = pod["containers"]
  assert container["resources"]["limits"] == {"google.com/tpu": 4}
  assert container["command"] == [
      "python", "-m", "mlmjax.main", "--config=configs/bert.py:base",
      "--workdir=gs://bucket/runs/bert", "--config.train.steps=100000"]
  assert not [e for e in container["env"] if e["name"].startswith("MEGASCALE")]


def test_two_v6e_256_slices_get_what_joins_them():
  proc = _run("jobset", "--tpu-type=v6e-256", "--num-slices=2", *ARGS)
  assert proc.returncode == 0, proc.stderr
  job, spec, pod = _pod(yaml.safe_load(proc.stdout))
  assert job["replicas"] == 2 and spec["parallelism"] == 64  # 256 chips, 4 per TPU VM
  assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "16x16"
  assert pod["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] == "tpu-v6e-slice"
  env = {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["containers"][0]["env"]}
  assert env["MEGASCALE_NUM_SLICES"] == "2" and env["MEGASCALE_PORT"] == "8080"
  assert env["MEGASCALE_SLICE_ID"] == {"fieldRef": {
      "fieldPath": "metadata.annotations['jobset.sigs.k8s.io/job-index']"}}
  assert env["MEGASCALE_COORDINATOR_ADDRESS"] == (
      "$(JOBSET_NAME)-$(REPLICATED_JOB_NAME)-0-0.$(JOBSET_NAME)")
  # Kubernetes expands $(VAR) only for variables defined before, in the same container.
  names = [e["name"] for e in pod["containers"][0]["env"]]
  assert names.index("JOBSET_NAME") < names.index("MEGASCALE_COORDINATOR_ADDRESS")


def test_a_single_host_slice_is_one_pod_with_all_its_chips():
  job, spec, pod = _pod(yaml.safe_load(_run("jobset", "--tpu-type=v5litepod-8", *ARGS).stdout))
  assert spec["parallelism"] == 1 and pod["containers"][0]["resources"]["limits"] == {
      "google.com/tpu": 8}
  assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x4"


def test_apply_dry_run_and_xpk_print_and_run_nothing(tmp_path):
  proc = _run("jobset", "--tpu-type=v5p-128", *ARGS, "--apply", "--dry-run", tmp_path=tmp_path)
  assert proc.returncode == 0, proc.stderr
  first, rest = proc.stdout.split("\n", 1)
  assert first == "+ kubectl apply -f -" and yaml.safe_load(rest)["kind"] == "JobSet"
  proc = _run("xpk", "--tpu-type=v6e-256", "--num-slices=2", "--cluster=tpus", "--zone=us-east5-b",
              *ARGS, "--dry-run", tmp_path=tmp_path)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.strip() == (
      "+ xpk workload create --cluster=tpus --workload=bert --tpu-type=v6e-256 --num-slices=2"
      " --docker-image=registry/mlmjax:1 '--command=python -m mlmjax.main"
      " --config=configs/bert.py:base --workdir=gs://bucket/runs/bert' --max-restarts=4"
      " --zone=us-east5-b")
  assert "FAKE CALLED" not in proc.stderr
  real = _run("jobset", "--tpu-type=v5p-128", *ARGS, "--apply", tmp_path=tmp_path)
  assert real.returncode == 99 and "FAKE CALLED" in real.stderr  # the real call reaches kubectl


# What gke.py accepts as --tpu-type, and its error says so: these forms, nothing else.
TPU_TYPES = ("v4-N or v5p-N (N TensorCores, 2 per chip: v5p-128 is 64 chips), v5litepod-N,"
             " v5e-N or v6e-N (N chips: v6e-256), for a slice size Cloud TPU has")


def test_bad_options_are_one_line():
  for args, message in (
      (["--tpu-type=v5p-7"], f"error: --tpu-type='v5p-7': name one TPU slice: {TPU_TYPES}"
       " (several slices: --num-slices)"),
      (["--tpu-type=h100x8"], f"error: --tpu-type='h100x8': name one TPU slice: {TPU_TYPES}"
       " (several slices: --num-slices)"),
      (["--tpu-type=2xv5p-64"], "error: --tpu-type='2xv5p-64': name one slice and the count"
       " apart: --tpu-type=v5p-64 --num-slices=2"),
      (["--tpu-type=v5p-8", "--workdir=/mnt/runs"], "error: --workdir='/mnt/runs': every pod"
       " writes the run, and a pod's disk is lost with it: use a bucket folder, gs://BUCKET/...")):
    proc = _run("jobset", *ARGS, *args)
    assert proc.returncode == 2 and proc.stderr == message + "\n", proc.stderr


def test_every_tpu_type_the_error_lists_is_accepted():
  """The forms in the message, each with a size, make a manifest (and the one example of
  several slices it once listed, 2xv5p-64, is refused above)."""
  for tpu_type, accelerator in (("v4-32", "tpu-v4-podslice"), ("v5p-128", "tpu-v5p-slice"),
                                ("v5litepod-16", "tpu-v5-lite-podslice"),
                                ("v5e-16", "tpu-v5-lite-podslice"), ("v6e-256", "tpu-v6e-slice")):
    assert tpu_type.split("-")[0] + "-N" in TPU_TYPES
    proc = _run("jobset", f"--tpu-type={tpu_type}", *ARGS)
    assert proc.returncode == 0, proc.stderr
    _, _, pod = _pod(yaml.safe_load(proc.stdout))
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] == accelerator


def test_mlmjax_starts_its_runtime_unchanged_in_a_jobset_pod(monkeypatch):
  """Pod 1 of slice 1 of 2 v5p-16 slices (2 TPU VMs each), as GKE and the manifest set its
  environment: mlmjax leaves the start-up to jax (no arguments), and jax's GKE cluster reads
  process 3 of 4 and the coordinator the manifest names."""
  from jax._src.clusters import cloud_tpu_cluster  # pylint: disable=g-import-not-at-top
  env = {"TPU_WORKER_HOSTNAMES": "bert-slice-1-0.bert,bert-slice-1-1.bert", "TPU_WORKER_ID": "1",
         "MEGASCALE_COORDINATOR_ADDRESS": "bert-slice-0-0.bert", "MEGASCALE_NUM_SLICES": "2",
         "MEGASCALE_SLICE_ID": "1", "MEGASCALE_PORT": "8080"}
  for k, v in env.items():
    monkeypatch.setenv(k, v)
  assert plugins.tpu_vm()
  calls = []
  monkeypatch.setattr(distributed.jax.distributed, "initialize",
                      lambda *a, **kw: calls.append((a, kw)))
  distributed.initialize(None, None, None)
  assert calls == [((), {})]  # jax detects the cluster itself
  monkeypatch.setattr(cloud_tpu_cluster, "running_in_cloud_tpu_vm", True)
  cluster = cloud_tpu_cluster.GkeTpuCluster
  assert cluster.is_env_present()
  assert (cluster.get_process_count(), cluster.get_process_id()) == (4, 3)
  assert cloud_tpu_cluster.get_tpu_env_value("MEGASCALE_COORDINATOR_ADDRESS") == (
      "bert-slice-0-0.bert")


def test_the_tpu_guide_shows_what_the_generator_prints():
  readme = open(os.path.join(REPO, "docs", "tpu.md"), encoding="utf-8").read()
  image, bucket = "--image=us-docker.pkg.dev/my-project/mlmjax/mlmjax:latest", "gs://my-bucket"
  common = ["--name=bert", image, f"--workdir={bucket}/runs/bert", "--config=configs/bert.py:base"]
  for args in (["xpk", "--tpu-type=v5p-128", "--cluster=my-cluster", "--project=my-project",
                "--zone=us-east5-a", *common, "--dry-run"],
               ["jobset", "--tpu-type=v6e-256", "--num-slices=2", *common, "--apply",
                "--dry-run"]):
    printed = _run(*args).stdout.rstrip()
    assert "\n".join("    " + line for line in printed.splitlines()) in readme, args[0]


# ---- launch/Dockerfile and .dockerignore ----------------------------------------------------

DOCKERFILE = os.path.join(REPO, "launch", "Dockerfile")


def _instructions(path):
  """(INSTRUCTION, arguments) of a Dockerfile: comments dropped, continued lines joined."""
  text = re.sub(r"\\\n", " ", open(path, encoding="utf-8").read())
  out = []
  for line in text.splitlines():
    if line.strip() and not line.lstrip().startswith("#"):
      word, _, rest = line.strip().partition(" ")
      out.append((word.upper(), rest.strip()))
  return out


def _dockerignore():
  with open(os.path.join(REPO, ".dockerignore"), encoding="utf-8") as f:
    return [l.strip() for l in f if l.strip() and not l.startswith("#")]


def test_dockerfile_installs_mlmjax_with_tpu_and_gcs_from_copied_files():
  steps = _instructions(DOCKERFILE)
  assert steps[0] == ("FROM", "python:3.12-slim")
  copies = [shlex.split(args) for word, args in steps if word == "COPY"]
  # Every file it copies is in the build context (the repository root) and not ignored.
  sources = [src for words in copies for src in words[:-1]]
  assert sources and all(os.path.exists(os.path.join(REPO, src)) for src in sources), sources
  assert {"setup.py", "README.md", "mlmjax"} <= set(sources)  # setup.py reads README.md
  # A regular install (not editable) with both extras, of the copied package.
  [pip] = [args for word, args in steps if word == "RUN" and "pip install" in args]
  words = shlex.split(pip)
  assert not {"-e", "--editable"} & set(words)
  [target] = [w for w in words if w.endswith("[tpu,gcs]")]
  package_dir = target[:-len("[tpu,gcs]")]
  assert [c for c in copies if c == ["setup.py", "README.md", package_dir + "/"]]
  # Every top-level package setup.py names (mlmjax, configs: the presets) is in the copy.
  with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
    [include] = re.findall(r"find_packages\(include=\[([^\]]*)\]", f.read())
  packages = {name.split(".")[0] for name in re.findall(r"\"([\w.*]+)\"", include)}
  assert "mlmjax" in packages
  for package in packages:
    assert [c for c in copies if c == [package, f"{package_dir}/{package}"]], package
  # gke.py's command (python -m mlmjax.main --config=configs/...) runs in the working
  # directory, where configs/ is; the image gives no entrypoint of its own.
  workdir = [args for word, args in steps if word == "WORKDIR"][-1]
  assert steps.index(("WORKDIR", workdir)) < steps.index(("COPY", "configs configs"))
  assert not [w for w, _ in steps if w in ("ENTRYPOINT", "CMD")]


def test_dockerignore_sends_only_what_the_dockerfile_copies():
  patterns = _dockerignore()
  assert patterns[0] == "*"  # everything out (.git, runs/, data/, ...), then back in:
  back_in = {p[1:] for p in patterns if p.startswith("!")}
  copied = {src.rstrip("/") for word, args in _instructions(DOCKERFILE) if word == "COPY"
            for src in shlex.split(args)[:-1]}
  assert back_in == copied
  assert not back_in & {"runs", ".git", "data"}
