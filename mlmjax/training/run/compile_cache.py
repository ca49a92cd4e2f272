"""jax's persistent compilation cache for a training run: compiled programs are kept on disk,
so a run resumed after a preemption or a crash (or started again with the same settings)
loads its train and eval steps instead of compiling them again, which on a TPU slice takes
minutes for a large model, on every host, before the first step.

train.compilation_cache: '' = the cache this process already has (JAX_COMPILATION_CACHE_DIR,
or one set in code), else WORKDIR/compile_cache; a folder, local or in a bucket (one cache for
many runs); 'off' = none. jax writes entries from process 0 and reads them on every process.
An entry's key holds the program, the compiler's options and version and the devices, so a
changed setting or an upgrade compiles anew instead of loading a stale program; programs that
compile in under a second are not kept (jax's default threshold).
"""

from __future__ import annotations

import contextlib

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cache


def folder(setting: str, run_folder: str) -> str | None:
  """Where compiled programs are kept for `setting` (module docstring); None: not kept."""
  if setting == "off":
    return None
  return setting or jax.config.jax_compilation_cache_dir or run_folder


@contextlib.contextmanager
def enabled(setting: str, run_folder: str):
  """Within, compiled programs are cached in folder(setting, run_folder); after, this
  process's cache is what it was (a notebook's next run, with another workdir, gets its own)."""
  before = (jax.config.jax_compilation_cache_dir, jax.config.jax_enable_compilation_cache)
  path = folder(setting, run_folder)
  wanted = (before[0], False) if path is None else (path, True)
  if wanted != before:
    _use(*wanted)
  try:
    yield
  finally:
    if wanted != before:
      _use(*before)


def describe() -> str:
  """Where this process keeps compiled programs, for the log."""
  on = jax.config.jax_enable_compilation_cache and jax.config.jax_compilation_cache_dir
  return jax.config.jax_compilation_cache_dir if on else "off"


def _use(path: str | None, on: bool) -> None:
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_enable_compilation_cache", on)
  jax_cache.reset_cache()  # jax opens its cache once: the next compilation opens this one
