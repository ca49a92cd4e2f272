"""Pretraining configs by name, from any folder and any install, and the overrides they refuse.

    --config=tiny             configs/tiny.py
    --config=bert:base        configs/bert.py with "base" passed to its get_config
    --config=my/config.py     a file of your own (a path always wins over a name)

The presets are the repository's top-level `configs/` folder, which is also `mlmjax/configs`
(a link), so they import as `mlmjax.configs` from a clone, an editable install or a wheel: a
`configs` folder where a command runs never shadows them, and a config of your own can build on
one (`from mlmjax.configs import bert`).

`load` loads a --config value once before the flags are parsed, so that a missing file, a file
that is not a config and an unknown variant are each one line naming the flag (mlmjax/cli.py
prints it); ml_collections then loads it again, with the overrides.
`ignored_overrides` finds the overrides a preset's train.phases would silently ignore.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import inspect
import os
import traceback

from mlmjax import configs
from mlmjax.errors import CommandLineError

# The keys train.phases decide when it is set (training/planning/phases.py): every phase names its
# own length and prediction slots, and these others where every phase's options name them.
PHASE_KEYS = ("data.seq_len", "masking.max_predictions_per_seq")
PHASE_OPTION_KEYS = {"batch_size": "train.batch_size", "rope_base": "model.rope_base",
                     "mask_rate": "masking.mask_rate"}


def folder() -> str:
  """Where the presets are (the `mlmjax.configs` package)."""
  return os.path.dirname(configs.__file__)


def names() -> list[str]:
  """The presets' names: base, bert, ..., tiny."""
  return sorted(f[:-3] for f in os.listdir(folder())
                if f.endswith(".py") and not f.startswith("_"))


def resolve(value: str) -> str:
  """A --config value as a file ml_collections loads: NAME[:VARIANT] of a preset becomes its
  file (with the variant); a path, or anything that is not a preset's name, stays as it is."""
  name, colon, variant = value.partition(":")
  if os.path.exists(name) or "/" in name or name.endswith(".py") or name not in names():
    return value
  return os.path.join(folder(), name + ".py") + colon + variant


def load(flag: str, given: str):
  """The config of a --config value as given (a preset's name or a file, [:VARIANT]), or a
  CommandLineError naming the flag: no such file or preset, not a config file, a variant its
  get_config refuses (the file's own message, unwrapped to its last line)."""
  path, colon, variant = resolve(given).partition(":")
  where = f"--{flag}={given}"
  if not os.path.isfile(path):
    raise CommandLineError(f"{where}: no such file, nor a preset of that name (presets:"
                           f" {', '.join(names())})")
  not_config = f"{where} is not a config file: a Python file with a get_config() function"
  try:  # as ml_collections loads it: any file name, as Python
    loader = importlib.machinery.SourceFileLoader(f"{flag}_checked", path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
  except Exception as e:  # pylint: disable=broad-except  # whatever the file does wrong
    if not path.endswith(".py"):
      raise CommandLineError(not_config) from None
    raise CommandLineError(f"{where}: cannot be loaded: {_last_line(e)}") from None
  get_config = getattr(module, "get_config", None)
  if not callable(get_config):
    raise CommandLineError(not_config)
  args = (variant,) if colon else ()
  try:
    inspect.signature(get_config).bind(*args)
  except TypeError:
    name = given.partition(":")[0]
    raise CommandLineError(f"{where}: {name} takes no variant" if args else
                           f"{where}: {name} needs a variant ({name}:VARIANT)") from None
  try:
    return get_config(*args)
  except Exception as e:  # pylint: disable=broad-except  # the preset's own message
    raise CommandLineError(f"{where}: {_last_line(e)}") from None


def ignored_overrides(config, overrides) -> str | None:
  """The message refusing those of `overrides` (the --config.KEY names given) that the
  config's train.phases decide, or None. Overriding train.phases as well says what the user
  wants: their phases decide."""
  phases = _phases(config)
  if not phases or "train.phases" in overrides:
    return None
  # the entries as the config gives them (training/settings.py's PhaseSpec reads them later:
  # importing it here would import jax before a command's compile target is known)
  decided = list(PHASE_KEYS) + [key for option, key in PHASE_OPTION_KEYS.items()
                                if all(len(p) > 3 and option in p[3] for p in phases)]
  keys = [k for k in decided if k in overrides]
  if not keys:
    return None
  return (f"--config.{keys[0]} would be ignored: train.phases={phases} decides it for every"
          " phase; set --config.train.phases instead (e.g. \"((1.0, 512, 80),)\": one phase"
          " of 512 tokens and 80 predictions a row), or --config.train.phases=\"()\" for"
          " one phase of data.seq_len and masking.max_predictions_per_seq")


def _phases(config):
  try:
    return tuple(config.train.phases)
  except (AttributeError, KeyError):  # not a pretraining config
    return ()


def _last_line(e: BaseException) -> str:
  """An exception's own message, without its type: 'unknown BERT size ...'."""
  text = "".join(traceback.format_exception_only(type(e), e)).strip().splitlines()[-1]
  return text.split(": ", 1)[1] if ": " in text else text
