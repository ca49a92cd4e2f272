"""Parallelism: the device mesh ('data', 'fsdp', 'tensor'), the logical-axis rules that shard
the parameters and batches over it, and JAX's multi-host runtime.

  sharding.py     mesh, rule table, parameter / batch / compute shardings
  distributed.py  jax.distributed start-up (pods, SLURM, one process) and host agreement
  targets.py      compile targets (v5p-8, 2xv5p-64, h100x8, ...) as devices without the chips
  hlo.py          what a compiled program holds: collectives with their bytes, kernels
  roofline.py     a compiled step's time predicted from its kernels and the chip's rates
  plugins.py      jax's CUDA plugin only where it is used (a GPU, a GPU compile target)
  settings.py     MeshSettings: config.mesh typed, with its rules
Imports only models/ (parameter names, the chips' rates).
"""
