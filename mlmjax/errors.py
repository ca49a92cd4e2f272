"""The base of every error caused by the user's input (data, config, files), not by a bug.

The command-line tools print these as one actionable line and exit non-zero, without a
traceback; anything else is a bug and keeps its traceback.
"""

import contextlib
import sys


class UserError(ValueError):
  pass


class ConfigError(UserError):
  """A config value mlmjax cannot use, with a message naming the key to change (the rules are
  in config_check.py)."""


class DataError(UserError):
  """Bad or missing input data, with a message a user can act on."""


class MissingDependencyError(UserError):
  """This machine lacks a package that compiling for a target needs (libtpu, jax's CUDA plugin,
  cuDNN), with the pip command that brings it: a fault of the machine, not of the config, so a
  sweep over configs stops at it rather than recording it as a result."""


@contextlib.contextmanager
def reported_in_one_line(verbose: bool = False):
  """For the commands: a UserError inside becomes `error: ...` on stderr and exit status 1
  (with `verbose`, the traceback instead)."""
  try:
    yield
  except UserError as e:
    if verbose:
      raise
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
