"""The two reference pages are generated from the code and must match it:

  docs/commands.md       every command's --help (its usage and flags)
  docs/configuration.md  every config key, its default and its comment: configs/base.py
                         (pretraining) and mlmjax/finetuning/config.py (fine-tuning)

After changing a command's flags or docstring, or a config key or its comment, regenerate them:

    python tests/project/test_reference_pages.py
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import command_lines  # pylint: disable=g-import-not-at-top,wrong-import-position
from mlmjax.__main__ import COMMANDS  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = command_lines.REPO
CONFIGS = (("Pretraining", "configs/base.py", "python -m mlmjax.main --config=tiny"
            " --workdir=runs/tiny --config.train.steps=500"),
           ("Fine-tuning", "mlmjax/finetuning/config.py", "python -m mlmjax.finetune"
            " --workdir=runs/tiny --task=kjv_qa --config.train.epochs=2"))
_REGENERATE = "python tests/project/test_reference_pages.py"


def commands_page() -> str:
  helps = command_lines.run([[f"mlmjax.{n}", "--help"] for n in COMMANDS])
  parts = [
      "# Commands", "",
      f"Generated from each command's `--help` ({_REGENERATE}). Every command is `python -m"
      " mlmjax.NAME` (`python -m mlmjax` lists them, a line each); bad input gets one"
      " `error:` line naming the flag (exit status 2 for a command line it cannot run, 1 for a"
      " failure on the way), running out of memory one line saying what was needed and what to"
      " do (exit status 1), and `--verbose` shows tracebacks instead.", ""]
  for name, out in zip(COMMANDS, helps):
    assert out.returncode == 0, out
    parts += [f"## {name}", "", "```text", out.stdout.rstrip(), "```", ""]
  return "\n".join(parts)


def _entries(path: str) -> list[tuple[str, str, str]]:
  """(section comment or '', key, comment) of each `config.KEY = ...` of a config file, in
  order; a comment covers the keys right below it."""
  entries, comment, last = [], [], []
  for line in open(os.path.join(REPO, path), encoding="utf-8"):
    text = line.strip()
    if text.startswith("#"):
      comment.append(text.lstrip("# ").rstrip())
      last = []
      continue
    key = re.match(r"config\.([\w.]+) = ", text)
    if key:
      last = comment or last
      entries.append((key.group(1), " ".join(last)))
      comment = []
    elif not text:
      comment, last = [], []
  return entries


def _default(config, key: str) -> str:
  value = config
  for part in key.split("."):
    value = value[part]
  return repr(value)


def configuration_page() -> str:
  parts = [
      "# Configuration keys", "",
      f"Every key of a config, its default and what it means, generated from the files that"
      f" define them ({_REGENERATE}). A preset (`--config=bert:base`) changes some of them;"
      " `--config.KEY=VALUE` overrides any one on the command line.", ""]
  for title, path, example in CONFIGS:
    spec = importlib.util.spec_from_file_location("config_file", os.path.join(REPO, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    parts += [f"## {title}", "", f"`{path}`; e.g. `{example}`.", ""]
    for key, comment in _entries(path):
      if hasattr(_value(config, key), "keys"):  # a section: its keys follow
        parts += ["", f"### {key}", ""] + ([comment, ""] if comment else [])
        continue
      parts.append(f"- **`{key}`** = `{_default(config, key)}`" + (f": {comment}" if comment
                                                                    else ""))
    parts.append("")
  return "\n".join(parts)


def _value(config, key: str):
  for part in key.split("."):
    config = config[part]
  return config


PAGES = {"docs/commands.md": commands_page, "docs/configuration.md": configuration_page}


def test_the_reference_pages_are_generated_from_the_code():
  stale = [page for page, make in PAGES.items()
           if open(os.path.join(REPO, page), encoding="utf-8").read() != make()]
  assert not stale, f"{stale} differ from the code: regenerate them with {_REGENERATE}"


def test_every_config_key_is_on_the_page():
  for _, path, _ in CONFIGS:
    spec = importlib.util.spec_from_file_location("config_file", os.path.join(REPO, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    keys = {k for k, _ in _entries(path)}
    config = module.get_config()
    every = set(config.keys()) | {f"{s}.{k}" for s in config.keys()
                                  if hasattr(config[s], "keys") for k in config[s].keys()}
    # A section taken whole from pretraining's config (fine-tuning's optimizer) has its keys
    # on the page there; here, those it changes.
    pretraining = {k for k, _ in _entries(CONFIGS[0][1])}
    every -= {k for k in every - keys if k.split(".")[0] in keys and k in pretraining}
    assert keys == every, (path, keys ^ every)


if __name__ == "__main__":
  for page, make in PAGES.items():
    with open(os.path.join(REPO, page), "w", encoding="utf-8") as f:
      f.write(make())
    print(page)
