"""JAX's multi-controller runtime: one process per host, all running the same program.

`initialize` runs before anything touches a device. It always starts the runtime, even for a
single process, because the runtime's preemption service is what turns a SIGTERM (what TPU VMs
and SLURM send before preemption) into a step at which every host agrees to save (see the
train loop and orbax's `reached_preemption`).

  explicit flags      --coordinator_address=HOST:PORT --num_processes=N --process_id=I
                      (GPU/CPU clusters; the same address on every process)
  cluster detected    TPU pod slices and SLURM jobs: jax finds the peers itself
  otherwise           one process, coordinated through a free local port
"""

from __future__ import annotations

import json
import os

import jax
from jax.experimental import multihost_utils
import numpy as np
import portpicker

from mlmjax.parallel import plugins


def _in_a_cluster() -> bool:
  """A TPU VM (jax finds its pod-slice peers through the GCE metadata server, or GKE's
  TPU_WORKER_HOSTNAMES) or a multi-task SLURM job: jax configures those by itself."""
  slurm_tasks = int(os.environ.get("SLURM_NTASKS", "1") or 1)
  return plugins.tpu_vm() or slurm_tasks > 1


def several(coordinator_address: str | None, num_processes: int | None) -> bool:
  """Whether initialize() starts a runtime of several processes."""
  return bool(coordinator_address or num_processes) or _in_a_cluster()


def initialize(coordinator_address: str | None, num_processes: int | None,
               process_id: int | None, timeout_s: int | None = None) -> None:
  """`timeout_s`: how long jax waits for every process to join (default: jax's, 300 s)."""
  kwargs = {} if timeout_s is None else {"initialization_timeout": timeout_s}
  if coordinator_address or num_processes:
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id, **kwargs)
  elif _in_a_cluster():
    jax.distributed.initialize(**kwargs)
  else:
    _initialize_single_process()


def _initialize_single_process() -> None:
  jax.distributed.initialize(coordinator_address=f"localhost:{portpicker.pick_unused_port()}",
                             num_processes=1, process_id=0)


def allgather_json(obj) -> list:
  """Every process's JSON-serialisable `obj`, in process order (a collective: all must call)."""
  if jax.process_count() == 1:
    return [obj]
  data = np.frombuffer(json.dumps(obj).encode("utf-8"), np.uint8)
  lengths = np.asarray(multihost_utils.process_allgather(np.array([len(data)], np.int32)))
  padded = np.zeros(int(lengths.max()), np.uint8)
  padded[:len(data)] = data
  everyone = np.asarray(multihost_utils.process_allgather(padded))
  return [json.loads(bytes(row[:n])) for row, n in zip(everyone, lengths.ravel())]
