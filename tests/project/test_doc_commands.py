"""Every `python -m mlmjax.NAME ...` command line that README.md and docs/ show goes through
that command's real flag parser and config loading (with absl's --only_check_args, which stops
before the command runs), so a page that names a flag, a config key or a preset that does not
exist fails here. Lines come from code blocks and from inline code (a bare command name in a
sentence is not a command line); a shell line's other commands (`pip install ... && python
-m ...`) and comments are left out."""

from __future__ import annotations

import os
import pathlib
import re
import shlex

import pytest

import command_lines
from conftest import REPO, user_env

# Not the reference pages generated from the commands' own docstrings and the config files'
# comments (tests/project/test_reference_pages.py), which write usage lines with [optional]
# parts: their flags and keys are the code's own.
GENERATED = ("commands.md", "configuration.md")
PAGES = [pathlib.Path(REPO, "README.md"), *sorted(p for p in pathlib.Path(REPO, "docs").glob(
    "*.md") if p.name not in GENERATED)]
_COMMAND = re.compile(r"python -m mlmjax\.([a-z_]+)\b")
_SHELL = {"&&", "||", ";", "|", ">", ">>", "<", "2>&1", "&"}


def _code(text: str) -> list[str]:
  """The shell lines of a page: its code blocks (fenced or indented by 4) with continuation
  lines joined, and its inline code spans."""
  lines, block, fenced = [], [], False
  for line in text.splitlines():
    if line.lstrip().startswith("```"):
      fenced = not fenced
      continue
    if fenced or line.startswith("    "):
      block.append(line.strip())
      continue
    lines += _joined(block)
    block = []
    lines += re.findall(r"`([^`\n]+)`", line)
  return lines + _joined(block)


def _joined(block: list[str]) -> list[str]:
  out, current = [], ""
  for line in block:
    current += line[:-1] + " " if line.endswith("\\") else line
    if not line.endswith("\\"):
      out.append(current)
      current = ""
  return out + ([current] if current else [])


def command_lines_of(text: str) -> list[list[str]]:
  """["mlmjax.NAME", args...] of each `python -m mlmjax.NAME ...` in the page's code."""
  found = []
  for line in _code(text):
    for match in _COMMAND.finditer(line):
      try:
        words = shlex.split(line[match.start():], comments=True)
      except ValueError:  # an unclosed quote: not a command line (prose about one)
        continue
      argv = [f"mlmjax.{match.group(1)}"]
      for word in words[3:]:
        if word in _SHELL or word.startswith(("2>", ">")):
          break
        argv.append(word)
      if len(argv) > 1:  # not a bare name (`python -m mlmjax.compile` in a sentence)
        found.append(argv)
  return found


def test_command_lines_of_reads_what_a_page_shows():
  page = ("Run `python -m mlmjax.predict --workdir=runs/tiny \"the [MASK]\"` then:\n\n"
          "    pip install -e . && python -m mlmjax.main --config=tiny \\\n"
          "        --workdir=runs/t  # a comment\n\n"
          "```\npython -m mlmjax.tokenizer encode --workdir=runs/t < verses.txt\n```\n")
  assert command_lines_of(page) == [
      ["mlmjax.predict", "--workdir=runs/tiny", "the [MASK]"],
      ["mlmjax.main", "--config=tiny", "--workdir=runs/t"],
      ["mlmjax.tokenizer", "encode", "--workdir=runs/t"]]


def _as_checked(argv: list[str]) -> list[str]:
  """`argv` to check: a config file of the reader's own (not in this repository, not a preset)
  read as configs/base.py, which such files build on, so that its overrides are still
  checked, and a --user_dir of the reader's own left out; then absl's --only_check_args."""
  out = []
  for word in argv:
    if word.startswith(("--config=", "--user_dir=")):
      path = word.split("=", 1)[1].split(":")[0]
      if path.endswith(".py") and not os.path.exists(os.path.join(REPO, path)):
        if word.startswith("--user_dir="):
          continue
        word = "--config=configs/base.py"
    out.append(word)
  return out + ["--only_check_args"]


LINES = [(f"{page.name}:{i}", argv) for page in PAGES
         for i, argv in enumerate(command_lines_of(page.read_text(encoding="utf-8")))]


def test_the_pages_show_command_lines():
  assert len(LINES) > 30 and {a[0] for _, a in LINES} >= {
      f"mlmjax.{n}" for n in ("main", "predict", "evaluate", "export", "finetune", "embed",
                              "prepare", "plot", "tokenizer", "bench", "input_bench",
                              "show_masks", "compile")}


@pytest.fixture(scope="module")
def parsed():
  return command_lines.run([_as_checked(argv) for _, argv in LINES], env=user_env())


def test_every_command_line_of_the_docs_parses(parsed):
  bad = [f"{where}: python -m {' '.join(map(shlex.quote, argv))}\n    {out.stderr.strip()}"
         for (where, argv), out in zip(LINES, parsed) if out.returncode != 0 or out.stderr]
  assert not bad, "command lines in the docs that do not parse:\n" + "\n".join(bad)
