"""Outside training/objectives/, no library code compares objective names or probes a batch,
the model's outputs or the sums for an objective's own keys: the run asks the objective
(objectives/base.py), so a new one is one module (issue 65)."""

import ast
import os

from project import code_graph
from mlmjax.training import objectives

OBJECTIVES_PACKAGE = os.path.join("mlmjax", "training", "objectives")
# What only an objective knows of a batch and of the model's outputs (its sums: sum_keys).
OWN_KEYS = {"masked_rates", "nsp_labels", "nsp_logits", "sbo_logits", "rtd_logits",
            "rtd_labels", "mlm_logits", "mlm_features", "masked_features", "clm_features",
            *(k for name in objectives.names() for k in objectives.get(name).sum_keys)}


def _strings(node: ast.AST) -> set[str]:
  """The string constants of an expression, and of a tuple, list or set of them."""
  items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
  return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def offences(source: str) -> list[str]:
  """The comparisons in `source` that name an objective or probe for an objective's key."""
  out = []
  for node in ast.walk(ast.parse(source)):
    if not isinstance(node, ast.Compare):
      continue
    sides = [node.left, *node.comparators]
    strings = set().union(*map(_strings, sides))
    text = ast.unparse(node)
    names_one = strings & set(objectives.names()) and ("objective" in text or "kind" in text)
    probes = strings & OWN_KEYS and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops)
    if names_one or probes:
      out.append(f"line {node.lineno}: {text}")
  return out


def test_nothing_outside_the_objectives_compares_their_names_or_probes_their_keys():
  found = {}
  for name, path in code_graph.modules().items():
    if OBJECTIVES_PACKAGE in path:
      continue
    bad = offences(open(path, encoding="utf-8").read())
    if bad:
      found[name] = bad
  assert found == {}


def test_the_check_finds_each_kind_of_offence():
  assert offences('if settings.objective.kind == "electra": pass') == [
      "line 1: settings.objective.kind == 'electra'"]
  assert offences('x = phase.objective in ("mlm", "diffusion")') == [
      "line 1: phase.objective in ('mlm', 'diffusion')"]
  assert offences('if "masked_rates" in batch: pass') == ["line 1: 'masked_rates' in batch"]
  assert offences('if "nsp_count" in sums: pass') == ["line 1: 'nsp_count' in sums"]
  assert offences('if arch.model_type == "electra": pass') == []  # transformers' model type
