"""`python -m mlmjax`: the commands, a line each. Each is `python -m mlmjax.NAME`; `--help`
after one lists its flags, and docs/commands.md has every command's help."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys

COMMANDS = ("main", "predict", "generate", "evaluate", "export", "finetune", "embed", "prepare",
            "plot", "tokenizer", "bench", "input_bench", "show_masks", "compile")


def summary(name: str) -> str:
  """The first sentence of the command's docstring (its first clause where that is long), read
  from its source: listing the commands imports none of them (each would start jax)."""
  path = importlib.util.find_spec(f"mlmjax.{name}").origin
  with open(path, encoding="utf-8") as f:
    doc = ast.get_docstring(ast.parse(f.read())) or ""
  first = " ".join(doc.split("\n\n")[0].split())
  sentence = re.split(r"\. ", first + " ", maxsplit=1)[0].rstrip(". ")
  return sentence if len(sentence) <= 90 else sentence.split(": ")[0]


def main() -> None:
  if [a for a in sys.argv[1:] if a not in ("-h", "--help")]:
    print(f"error: python -m mlmjax takes no arguments ({' '.join(sys.argv[1:])}): run a command"
          " as python -m mlmjax.COMMAND; python -m mlmjax alone lists them", file=sys.stderr)
    sys.exit(2)  # a command line it cannot run, as every command answers one
  width = max(map(len, COMMANDS))
  print("python -m mlmjax.COMMAND [--flags]  (COMMAND --help lists its flags)\n")
  for name in COMMANDS:
    print(f"  {name:<{width}}  {summary(name)}")


if __name__ == "__main__":
  main()
