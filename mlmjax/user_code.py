"""Code of your own, imported by its path: a pretraining objective registered with
mlmjax.training.objectives.register (or anything else that registers on import). A run names
it in its `user_dir` key, which its config.json keeps, so that every command that reads the run
back (evaluate, predict, generate, export, finetune) imports it again, as fairseq keeps its
--user-dir in its checkpoints; every command's --user_dir imports one too (mlmjax/cli.py).
Imports nothing of mlmjax but errors.py.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from mlmjax.errors import ConfigError


def load(path: str, where: str) -> None:
  """Imports `path`: a .py file as the module of its name, or a package folder (its parent put
  on sys.path). Once: a module of that name imported already (by --user_dir, or the config
  file itself) is kept, even where `path` is gone. A ConfigError starting with `where` (the
  flag or key that named it) if it cannot be imported."""
  folder = os.path.abspath(path.rstrip("/"))
  is_file = folder.endswith(".py")
  name = os.path.basename(folder)[:-3] if is_file else os.path.basename(folder)
  if name in sys.modules:
    return
  if is_file and os.path.isfile(folder):
    spec = importlib.util.spec_from_file_location(name, folder)
  elif os.path.isfile(os.path.join(folder, "__init__.py")):
    sys.path.insert(0, os.path.dirname(folder))
    spec = None
  else:
    raise ConfigError(f"{where}: neither a .py file nor a folder with an __init__.py")
  try:
    if spec is None:
      importlib.import_module(name)
    else:
      module = importlib.util.module_from_spec(spec)
      sys.modules[name] = module
      spec.loader.exec_module(module)
  except Exception as e:  # pylint: disable=broad-except  # whatever the user's code does
    sys.modules.pop(name, None)
    raise ConfigError(f"{where}: cannot be imported: {type(e).__name__}: {e}") from None
