"""Parallelism: the device mesh ('data', 'fsdp', 'tensor'), the logical-axis rules that shard
the parameters and batches over it, and JAX's multi-host runtime.

  sharding.py     mesh, rule table, parameter / batch / compute shardings
  distributed.py  jax.distributed start-up (pods, SLURM, one process) and host agreement
Imports only models/ (parameter names).
"""
