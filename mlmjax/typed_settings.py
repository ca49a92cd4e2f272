"""How a config section becomes a frozen, typed settings object, once, at the top of a command.

Every settings class (models/settings.py, data/settings.py, data/text/settings.py,
data/masking/settings.py, parallel/settings.py, training/settings.py, training/core/optimizer.py,
finetuning/settings.py) is a frozen dataclass and a `Section` whose field names are its
section's keys; `from_config` reads them with their declared types (a key the section does not
read is refused), and the class's `__post_init__` checks the rules of its own keys, so a bad
value fails where it is made with one line naming the `--config.` key. Rules across sections
(a phase longer than the model's positions, a batch the mesh cannot split) are
training/config_check.py's.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, TypeVar

from mlmjax.errors import ConfigError

T = TypeVar("T")
_SCALARS = {"int": int, "float": float, "bool": bool, "str": str}


def _frozen(value):
  """Lists (a config's tuples read back from JSON) as tuples, at any depth; dicts stay."""
  if isinstance(value, (list, tuple)):
    return tuple(_frozen(v) for v in value)
  return value


def from_section(cls: type[T], section, prefix: str) -> T:
  """`section` (a ConfigDict, or any mapping of the keys) -> `cls`, each init field read from
  the key of its name and converted to its declared type: int, float, bool, str, or a tuple
  (taken as it is, lists made tuples). `prefix` ('model', 'data', ...) names the keys in errors."""
  values = {}
  fields = [f for f in dataclasses.fields(cls) if f.init]
  # A key the section does not read would be dropped without a word (a misspelled or moved key)
  unknown = sorted(set(section.keys()) - {f.name for f in fields})
  if unknown:
    raise ConfigError(f"{prefix}.{unknown[0]}: no such config key")
  for field in fields:
    value = section[field.name]
    kind = _SCALARS.get(str(field.type))
    if kind is int and (isinstance(value, bool) or not isinstance(value, (int, float))
                        or int(value) != value):
      raise ConfigError(f"{prefix}.{field.name}={value!r} must be a whole number")
    values[field.name] = _frozen(value) if kind is None else kind(value)
  return cls(**values)


class Section:
  """The base of a section's settings class (a frozen dataclass): `KEY` names its section."""

  KEY: ClassVar[str]

  @classmethod
  def from_config(cls, section):
    """config.KEY (a ConfigDict, or any mapping of its keys) -> settings; a ConfigError naming
    the `KEY.` key of the first rule a value breaks."""
    return from_section(cls, section, cls.KEY)

  def config_keys(self) -> dict:
    """The section's config keys and values (its init fields)."""
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

  def replace(self, **changes):
    """A copy with some keys changed, made again from its keys (so values take its types and
    meet its rules); a key the section lacks is a ConfigError (a misspelled key would
    otherwise be dropped without a word)."""
    keys = self.config_keys()
    unknown = sorted(set(changes) - set(keys))
    if unknown:
      raise ConfigError(f"{self.KEY}.{unknown[0]}: no such config key")
    return type(self).from_config({**keys, **changes})


def one_of(key: str, value, allowed) -> None:
  if value not in allowed:
    raise ConfigError(f"{key}={value!r} is not one of {', '.join(allowed)}")


def check_positive(key: str, value: int) -> None:
  if value < 1:
    raise ConfigError(f"{key}={value} must be >= 1")


def check_rate(key: str, rate: float) -> None:
  if not 0.0 < rate < 1.0:
    raise ConfigError(f"{key}={rate} must be strictly between 0 and 1")
