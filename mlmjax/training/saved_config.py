"""A run's saved config (WORKDIR/config.json): written with its format version, read back onto
today's defaults, so that runs saved by an earlier mlmjax still load.

    {"config_version": 1, "data": {...}, "masking": {...}, ..., "train": {...}}

The file is the run's resolved config, as it always was, plus one top-level key,
`config_version`: a wrapper ({"version": .., "config": {..}}) would break every script that
reads config.json's keys, and a key inside the config would let --config.config_version change
it. A file without it was written before versions were (format 0). VERSION goes up when a key is
renamed or changes meaning; the older formats' files are then converted in `read`, before the
merge. Keys added since need no new version: the merge gives them today's default.

`load` starts from today's defaults (configs/base.py) and overwrites them with the saved values,
recursively: a key added since the run was saved takes today's default (a new key's default is
the behaviour before it), a saved value takes its default's type (JSON's lists back to tuples,
an int where a float goes), and keys mlmjax no longer knows are named in one warning line and
ignored. A saved value that does not fit its key's type, or that today's rules refuse, is a
one-line DataError naming the file and the key (the run's file is at fault, not the command line).
"""

from __future__ import annotations

import json

from absl import logging
from mlmjax.configs import base
import ml_collections

from mlmjax import errors
from mlmjax import paths
from mlmjax.training.run_settings import MOVED_IN_2
from mlmjax.training.run_settings import RunSettings

VERSION = 2  # 2: the optimizer's keys moved from train.* to optimizer.* (MOVED_IN_2)
VERSION_KEY = "config_version"


def dumps(config: ml_collections.ConfigDict) -> str:
  """The text of config.json: `config` and the format version, keys sorted."""
  saved = json.loads(config.to_json_best_effort())
  return json.dumps({VERSION_KEY: VERSION, **saved}, indent=2, sort_keys=True)


def read(path: str) -> dict:
  """config.json at `path` as saved, without its version; a newer format is refused (its keys
  may mean something else than here)."""
  try:
    saved = json.loads(paths.read_text(path))
  except json.JSONDecodeError as e:
    raise errors.DataError(f"{path} is not valid JSON ({e})") from None
  if not isinstance(saved, dict):
    raise errors.DataError(f"{path} holds no config (a JSON object)")
  version = saved.pop(VERSION_KEY, 0)
  if not isinstance(version, int) or not 0 <= version <= VERSION:
    raise errors.DataError(f"{path} has {VERSION_KEY}={version!r}: this mlmjax reads formats"
                             f" up to {VERSION}; load the run with a newer mlmjax")
  if version < 2:
    saved = _moved(saved, MOVED_IN_2)
  return saved


def _moved(saved: dict, moves: dict) -> dict:
  """`saved` with each (section, key) of `moves` that it holds moved to its new place."""
  out = {k: dict(v) if isinstance(v, dict) else v for k, v in saved.items()}
  for (section, key), (new_section, new_key) in moves.items():
    if isinstance(out.get(section), dict) and key in out[section]:
      out.setdefault(new_section, {})[new_key] = out[section].pop(key)
  return out


def defaults() -> ml_collections.ConfigDict:
  """Today's defaults of a pretraining run (configs/base.py), a fresh copy."""
  return base.get_config()


def load(path: str):
  """The pretraining run saved at `path` (assembly.py's Assembly: its RunSettings, read onto
  today's defaults (module doc), and its phases' plan), checked as its checkpoint needs."""
  saved = read(path)
  if "run" in saved:  # the record finetuning/trainer.py adds to a fine-tuning run's config
    raise errors.UserError(f"{path} is a fine-tuning run's config: give the workdir of a"
                           " pretraining run")
  config, unknown = defaults(), []
  _merge(config, saved, path, "", unknown)
  if unknown:
    # A warning, not an error: mlmjax computes nothing from a key it no longer reads, and a
    # retired key whose value shaped the model leaves parameters the restore cannot match,
    # which checkpoint.py names; refusing here would strand runs for a key merely retired.
    # Every such key in one line, so that none hides in a long log.
    logging.warning("%s: ignoring keys this mlmjax no longer knows: %s", path,
                    ", ".join(sorted(unknown)))
  # Imported here: config_check brings the model stack, which the commands that only read a
  # workdir's files (plot, tokenizer) do not need.
  from mlmjax.training import assembly  # pylint: disable=g-import-not-at-top
  from mlmjax.training import config_check  # pylint: disable=g-import-not-at-top
  try:
    parts = assembly.Assembly.of(RunSettings.from_config(config))
    config_check.check_saved(parts.settings, parts.plan)
  except errors.ConfigError as e:
    raise errors.DataError(f"{path}: {e}") from None
  return parts


def _merge(config: ml_collections.ConfigDict, saved: dict, path: str, prefix: str,
           unknown: list[str]) -> None:
  """Overwrites `config`'s values with `saved`'s, recursively (names of keys `config` lacks
  go to `unknown`)."""
  for key, value in saved.items():
    name = prefix + key
    if key not in config:
      unknown.append(name)
      continue
    default = config[key]
    if isinstance(default, ml_collections.ConfigDict):
      if not isinstance(value, dict):
        raise _unreadable(path, name, value, "a group of keys")
      _merge(default, value, path, name + ".", unknown)
      continue
    if isinstance(default, tuple) and isinstance(value, list):
      value = _tuples(value)  # JSON has no tuples: mesh.rules, train.phases are tuples of them
    try:
      config[key] = value  # ConfigDict's type check: an int may become a float, nothing else
    except TypeError:
      raise _unreadable(path, name, value, f"of type {type(default).__name__}") from None


def _unreadable(path: str, name: str, value, what: str) -> errors.DataError:
  return errors.DataError(f"{path}: {name}={value!r} cannot be read: today {name} is {what}")


def _tuples(value):
  """JSON lists (at any depth) as tuples; objects stay dicts (a train.phases entry's options)."""
  if isinstance(value, list):
    return tuple(_tuples(v) for v in value)
  return value
