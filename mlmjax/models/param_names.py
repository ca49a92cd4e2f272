"""A parameter's name: one spelling for messages, flat {name: array} dicts, sharding warnings,
checkpoint checks and the Hugging Face conversion rules."""

from __future__ import annotations


def path_keys(path) -> tuple:
  """A jax tree path as plain keys: ('blocks', 0, 'mlp_in', 'kernel')."""
  return tuple(getattr(k, "key", getattr(k, "idx", k)) for k in path)


def param_name(keys: tuple) -> str:
  """'blocks/0/mlp_in/kernel': a parameter's name in messages and in flat {name: array} dicts
  (the same whether layer indices are list indices, dict keys or their saved strings)."""
  return "/".join(map(str, keys))
