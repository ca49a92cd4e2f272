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

import os

import jax
import portpicker


def _in_a_cluster() -> bool:
  """A multi-worker TPU slice or a multi-task SLURM job, which jax can configure by itself."""
  tpu_hosts = os.environ.get("TPU_WORKER_HOSTNAMES", "")
  slurm_tasks = int(os.environ.get("SLURM_NTASKS", "1") or 1)
  return "," in tpu_hosts or slurm_tasks > 1


def initialize(coordinator_address: str | None, num_processes: int | None,
               process_id: int | None) -> None:
  if coordinator_address or num_processes:
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id)
  elif _in_a_cluster():
    jax.distributed.initialize()
  else:
    jax.distributed.initialize(coordinator_address=f"localhost:{portpicker.pick_unused_port()}",
                               num_processes=1, process_id=0)
