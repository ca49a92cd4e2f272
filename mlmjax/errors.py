"""The base of every error caused by the user's input (data, config, files), not by a bug.

The commands (mlmjax/cli.py) print these as one actionable line, `error: ...`, and exit with
the error's `exit_status` (2: the command line asks for something mlmjax cannot do; 1: it
failed on the way), without a traceback; anything else is a bug and keeps its traceback, but running out of
memory, which `out_of_memory` turns into one line with what to do (exit status 1).
"""

import re


class UserError(ValueError):
  exit_status = 1


class CommandLineError(UserError):
  """A command line that cannot run: an unknown flag, a bad flag value, a missing required
  flag, a --config that cannot be loaded, an override that would be ignored."""
  exit_status = 2


class ConfigError(UserError):
  """A config value mlmjax cannot use, with a message naming the key to change (the rules are
  in config_check.py)."""
  exit_status = 2


class DataError(UserError):
  """Bad or missing input data, with a message a user can act on."""


class MissingDependencyError(UserError):
  """This machine lacks a package that compiling for a target needs (libtpu, jax's CUDA plugin,
  cuDNN), with the pip command that brings it: a fault of the machine, not of the config, so a
  sweep over configs stops at it rather than recording it as a result."""



GiB = 1 << 30


def out_of_memory(e: BaseException, config: str | None = None) -> str | None:
  """The one line for an exception that is the machine running out of memory (the host's
  MemoryError, a device's or the compiler's RESOURCE_EXHAUSTED), or None for any other. It
  says how much was asked for when the message says so, and what to do; `config`: the
  --config given, for the command to check it with."""
  text = str(e)
  if not isinstance(e, MemoryError) and not (
      isinstance(e, RuntimeError) and text.startswith("RESOURCE_EXHAUSTED")):
    return None
  # the CPU and GPU runtimes: "Out of memory allocating N bytes"; TPU compiles: "Used 20.5G
  # of 15.48G hbm"
  wanted = re.search(r"allocat\w* (\d+) bytes", text)
  used = re.search(r"Used ([\d.]+)G of ([\d.]+)G", text)
  if wanted:
    need = f": a step needed {int(wanted.group(1)) / GiB:.2f} GiB at once"
  elif used:
    need = f": a step needed {used.group(1)} GiB of {used.group(2)} GiB"
  else:
    need = ""
  check = f"--config={config}" if config else "--config=CONFIG"
  return (f"out of memory{need}. `python -m mlmjax.compile {check} --target=TARGET` shows"
          " what a config needs on a TPU slice or GPU node before a run; to fit this machine:"
          " --config.train.fit=auto (micro-batches and rematerialisation chosen by compiling;"
          " on a CPU also --config.train.fit_memory_gib=GIB), a smaller"
          " --config.train.batch_size, or a smaller preset (tiny, bert:mini)")
