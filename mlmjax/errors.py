"""The base of every error caused by the user's input (data, config, files), not by a bug.

The commands (mlmjax/cli.py) print these as one actionable line, `error: ...`, and exit with
the error's `exit_status` (2: the command line asks for something mlmjax cannot do; 1: it
failed on the way), without a traceback; anything else is a bug and keeps its traceback.
"""


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

