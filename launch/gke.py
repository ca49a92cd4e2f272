"""mlmjax on TPU slices in a GKE cluster: a JobSet manifest, or the equivalent xpk command.

  python launch/gke.py jobset --name=bert --tpu-type=v5p-128 --image=IMAGE \
      --workdir=gs://BUCKET/runs/bert [--num-slices=2] [--config=configs/bert.py:base] \
      [--apply] [--dry-run] [-- MLMJAX_FLAGS...]
  python launch/gke.py xpk --name=bert --tpu-type=v5p-128 --image=IMAGE --cluster=CLUSTER \
      --workdir=gs://BUCKET/runs/bert [--num-slices=2] [--project=P --zone=Z] [--dry-run]

`jobset` prints the manifest (with --apply it runs `kubectl apply -f -` on it; --dry-run prints
"+ kubectl apply -f -" and the manifest instead). It is Google's documented shape for TPU
training on GKE: one replicated Job per slice (`replicas` = slices), each with one pod per TPU
VM host of the slice (`parallelism` = `completions` = hosts), pinned to one node pool of the
slice's accelerator and topology (the node selectors, and JobSet's exclusive-topology
annotation), host networking, the host's TPU chips as `google.com/tpu`, and for several slices
the MEGASCALE_* variables that join them over the data-center network (slice 0's first pod
coordinates; each pod reads its slice from JobSet's job-index annotation). Every pod runs the
same `python -m mlmjax.main`: on GKE, jax finds its peers from the variables GKE sets
(TPU_WORKER_HOSTNAMES, TPU_WORKER_ID) and the MEGASCALE_* ones, so mlmjax starts its
multi-process runtime unchanged (mlmjax/parallel/distributed.py). The workdir must be a bucket
(every pod writes the checkpoint; a pod's disk is gone when it is). A pod that fails fails its
slice's Job and JobSet restarts the whole set (`failurePolicy.maxRestarts`): the run resumes
from its last checkpoint. That includes a process the watchdog stopped (exit status 75: it made
no progress; docs/goodput.md).

`xpk` prints (or, without --dry-run, runs) `xpk workload create` with the same command, image,
TPU type, slices and restarts (xpk's own default is none), for clusters made with xpk
(MaxText's workflow).

The image must hold mlmjax installed with `[tpu,gcs]` (libtpu, and the bucket's client) and the
configs/ folder in its working directory: launch/Dockerfile builds one (docs/tpu.md).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mlmjax.parallel import targets  # pylint: disable=g-import-not-at-top,wrong-import-position

# GKE's node label of each TPU family's multi-host slices.
ACCELERATOR = {"v4": "tpu-v4-podslice", "v5p": "tpu-v5p-slice",
               "v5litepod": "tpu-v5-lite-podslice", "v5e": "tpu-v5-lite-podslice",
               "v6e": "tpu-v6e-slice"}
CHIPS_PER_HOST = 4  # a multi-host slice's TPU VMs each have 4 chips
SINGLE_HOST_CHIPS = {"v4": 4, "v5p": 4, "v5litepod": 8, "v5e": 8, "v6e": 8}
# What --tpu-type takes: the names targets.parse_tpu reads, one slice each, of the families above.
TPU_TYPES = ("v4-N or v5p-N (N TensorCores, 2 per chip: v5p-128 is 64 chips),"
             " v5litepod-N, v5e-N or v6e-N (N chips: v6e-256), for a slice size Cloud TPU has")
# Ports: the TPU runtime's (8471), the megascale coordinator's (8080), metrics (8431).
PORTS = (8471, 8080, 8431)
MEGASCALE_PORT = 8080


class LaunchError(Exception):
  pass


def hosts_and_chips(tpu: targets.TpuSlice) -> tuple[int, int]:
  """(TPU VM hosts of one slice, chips per host)."""
  if tpu.chips <= SINGLE_HOST_CHIPS[tpu.family]:
    return 1, tpu.chips
  return tpu.chips // CHIPS_PER_HOST, CHIPS_PER_HOST


def mlmjax_command(config: str, workdir: str, extra: list[str]) -> list[str]:
  return ["python", "-m", "mlmjax.main", f"--config={config}", f"--workdir={workdir}", *extra]


def _annotation(key: str) -> dict:
  return {"valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}}}


def jobset(name: str, tpu: targets.TpuSlice, image: str, command: list[str],
           max_restarts: int) -> dict:
  """The JobSet manifest (module docstring) as a dict."""
  hosts, chips = hosts_and_chips(tpu)
  env = [{"name": "JOBSET_NAME", **_annotation("jobset.sigs.k8s.io/jobset-name")},
         {"name": "REPLICATED_JOB_NAME", **_annotation("jobset.sigs.k8s.io/replicatedjob-name")}]
  if tpu.slices > 1:
    env += [
        # Pod 0 of slice 0, by the headless service JobSet makes: JOBSET-JOB-INDEX-POD.JOBSET
        {"name": "MEGASCALE_COORDINATOR_ADDRESS",
         "value": "$(JOBSET_NAME)-$(REPLICATED_JOB_NAME)-0-0.$(JOBSET_NAME)"},
        {"name": "MEGASCALE_NUM_SLICES", "value": str(tpu.slices)},
        {"name": "MEGASCALE_SLICE_ID", **_annotation("jobset.sigs.k8s.io/job-index")},
        {"name": "MEGASCALE_PORT", "value": str(MEGASCALE_PORT)},
    ]
  container = {
      # The command itself, not a shell: Kubernetes' SIGTERM before an eviction reaches mlmjax,
      # which then saves a checkpoint (the preemption path of the train loop).
      "name": "mlmjax", "image": image, "command": command,
      "env": env, "ports": [{"containerPort": p} for p in PORTS],
      "securityContext": {"privileged": True},
      "resources": {"limits": {"google.com/tpu": chips}},
  }
  pod = {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet", "restartPolicy": "Never",
         "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": ACCELERATOR[tpu.family],
                          "cloud.google.com/gke-tpu-topology": tpu.topology},
         "containers": [container]}
  job = {"parallelism": hosts, "completions": hosts, "backoffLimit": 0,
         "template": {"spec": pod}}
  return {
      "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
      "metadata": {"name": name, "annotations": {
          "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}},
      "spec": {"failurePolicy": {"maxRestarts": max_restarts},
               "network": {"enableDNSHostnames": True},
               "replicatedJobs": [{"name": "slice", "replicas": tpu.slices,
                                   "template": {"spec": job}}]},
  }


def xpk_command(args, tpu_type: str, command: list[str]) -> list[str]:
  out = ["xpk", "workload", "create", f"--cluster={args.cluster}", f"--workload={args.name}",
         f"--tpu-type={tpu_type}", f"--num-slices={args.num_slices}",
         f"--docker-image={args.image}", f"--command={shlex.join(command)}",
         f"--max-restarts={args.max_restarts}"]
  out += [f"--project={args.project}"] * bool(args.project)
  out += [f"--zone={args.zone}"] * bool(args.zone)
  return out


def _parse(argv: list[str]):
  extra = argv[argv.index("--") + 1:] if "--" in argv else []
  argv = argv[:argv.index("--")] if "--" in argv else argv
  p = argparse.ArgumentParser(prog="launch/gke.py", description=__doc__.split("\n")[0])
  p.add_argument("action", choices=("jobset", "xpk"))
  p.add_argument("--name", required=True, help="the JobSet / xpk workload name")
  p.add_argument("--tpu-type", required=True, help=f"one slice: {TPU_TYPES}")
  p.add_argument("--num-slices", type=int, default=1)
  p.add_argument("--image", required=True, help="a container image with mlmjax[tpu,gcs]")
  p.add_argument("--workdir", required=True, help="the run folder: gs://BUCKET/...")
  p.add_argument("--config", default="configs/tiny.py", help="a preset (bert:base, ...) or a config file in the image's tree")
  p.add_argument("--max-restarts", type=int, default=4, help="restarts of the set (JobSet's failurePolicy, xpk's --max-restarts)")
  p.add_argument("--apply", action="store_true", help="jobset: kubectl apply it")
  p.add_argument("--cluster", default="", help="xpk: the GKE cluster")
  p.add_argument("--project", default="", help="xpk: the GCP project")
  p.add_argument("--zone", default="", help="xpk: the zone")
  p.add_argument("--dry-run", action="store_true", help="print the command instead")
  return p.parse_args(argv), extra


def main(argv: list[str]) -> int:
  args, extra = _parse(argv)
  tpu = targets.parse_tpu(args.tpu_type)
  if tpu is not None and tpu.slices != 1:
    one = args.tpu_type.split("x", 1)[1]
    raise LaunchError(f"--tpu-type={args.tpu_type!r}: name one slice and the count apart:"
                      f" --tpu-type={one} --num-slices={tpu.slices}")
  if tpu is None or tpu.family not in ACCELERATOR:
    raise LaunchError(f"--tpu-type={args.tpu_type!r}: name one TPU slice: {TPU_TYPES}"
                      " (several slices: --num-slices)")
  if args.num_slices < 1:
    raise LaunchError(f"--num-slices={args.num_slices} must be >= 1")
  if not args.workdir.startswith("gs://"):
    raise LaunchError(f"--workdir={args.workdir!r}: every pod writes the run, and a pod's disk"
                      " is lost with it: use a bucket folder, gs://BUCKET/...")
  tpu = targets.TpuSlice(tpu.family, args.num_slices, tpu.chips, tpu.grid)
  command = mlmjax_command(args.config, args.workdir, extra)
  if args.action == "xpk":
    if not args.cluster:
      raise LaunchError("xpk needs --cluster")
    line = xpk_command(args, args.tpu_type, command)
    print("+ " + shlex.join(line), file=sys.stdout if args.dry_run else sys.stderr)
    return 0 if args.dry_run else subprocess.run(line, check=False).returncode
  manifest = yaml.safe_dump(jobset(args.name, tpu, args.image, command, args.max_restarts),
                            sort_keys=False)
  if not args.apply:
    print(manifest, end="")
    return 0
  print("+ kubectl apply -f -", file=sys.stdout if args.dry_run else sys.stderr)
  if args.dry_run:
    print(manifest, end="")
    return 0
  return subprocess.run(["kubectl", "apply", "-f", "-"], input=manifest, text=True,
                        check=False).returncode


if __name__ == "__main__":
  try:
    sys.exit(main(sys.argv[1:]))
  except LaunchError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
