"""The library's modules and the imports among them, read from the source (ast), and the
layering the package docstrings state.

A package's docstring names each of its modules (`name.py`) and sub-packages (`name/`), and has
a paragraph starting `Imports` whose `pkg/` and `pkg/module.py` names, before any ';', are the
packages and modules its modules may import. A module may also import its own package and those below it, what its enclosing
packages may, and the modules every layer shares (BASE). The commands (mlmjax/*.py) may import
anything.

`python tests/project/code_graph.py` prints the counts a change to the structure is judged by.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = ("mlmjax.errors", "mlmjax.paths", "mlmjax.typed_settings", "mlmjax.user_code")


@functools.cache
def modules() -> dict[str, str]:
  """Dotted name -> file, for every module of mlmjax (a package by its __init__.py)."""
  out = {}
  # followlinks: mlmjax/configs is a link to the repository's configs/
  for folder, _, files in os.walk(os.path.join(ROOT, "mlmjax"), followlinks=True):
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(folder, name)
        dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
        out[dotted.removesuffix(".__init__")] = path
  return out


def is_package(name: str) -> bool:
  return modules()[name].endswith("__init__.py")


def package_of(name: str) -> str:
  """The package a module belongs to (a package belongs to itself)."""
  return name if is_package(name) else name.rpartition(".")[0]


@functools.cache
def imports(name: str, top_level_only: bool = False) -> frozenset[str]:
  """The mlmjax modules `name` imports (`from pkg import module` names the module)."""
  tree = ast.parse(open(modules()[name], encoding="utf-8").read())
  nodes = tree.body if top_level_only else ast.walk(tree)
  out = set()
  for node in nodes:
    if isinstance(node, ast.Import):
      out.update(a.name for a in node.names if a.name.split(".")[0] == "mlmjax")
    elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mlmjax":
      for alias in node.names:
        full = f"{node.module}.{alias.name}"
        out.add(full if full in modules() else node.module)
  return frozenset(out)


def reached(name: str) -> set[str]:
  """Every module loaded by importing `name` (top-level imports, transitively, with the
  packages each import runs on the way), `name` included."""
  seen, todo = set(), [name]
  while todo:
    module = todo.pop()
    if module in seen:
      continue
    seen.add(module)
    parts = module.split(".")
    todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # its packages' __init__
    todo.extend(imports(module, top_level_only=True))
  return seen


def docstring(package: str) -> str:
  return ast.get_docstring(ast.parse(open(modules()[package], encoding="utf-8").read())) or ""


def allowed_imports(package: str) -> set[str]:
  """The packages a module of `package` may import beyond its own and those below it."""
  out = set()
  while package != "mlmjax":
    # the paragraph starting "Imports", up to its first ';'
    found = re.search(r"^Imports.*?(?=\n\n|\Z)", docstring(package), re.M | re.S)
    line = found.group(0).split(";")[0] if found else ""
    names = (re.findall(r"\b([a-z_]+(?:/[a-z_]+)*)/(?!\w)", line) +  # packages: pkg/
             re.findall(r"\b([a-z_]+(?:/[a-z_]+)+)\.py\b", line))  # modules: pkg/module.py
    out.update("mlmjax." + p.replace("/", ".") for p in names)
    package = package.rpartition(".")[0]
  return out


def upward_imports() -> list[tuple[str, str]]:
  """(module, what it imports) for every import the layering does not allow."""
  bad = []
  for module in modules():
    package = package_of(module)
    if package == "mlmjax":  # the commands, cli.py, presets.py and BASE
      if module in BASE:
        bad.extend((module, m) for m in imports(module) if m not in BASE)
      continue
    allowed = allowed_imports(package)
    for target in imports(module):
      ok = (target in BASE or _under(target, package) or
            any(_under(target, a) for a in allowed))
      if not ok:
        bad.append((module, target))
  return sorted(bad)


def _under(module: str, package: str) -> bool:
  return module == package or module.startswith(package + ".")


def unlisted() -> list[str]:
  """Modules and sub-packages their package's docstring does not name."""
  out = []
  for module in modules():
    if module == "mlmjax":
      continue
    parent = module.rpartition(".")[0]
    last = module.rpartition(".")[2]
    entry = f"{last}/" if is_package(module) else f"{last}.py"
    if parent != "mlmjax" or is_package(module):
      if not re.search(rf"(?<![\w/.]){re.escape(entry)}", docstring(parent)):
        out.append(module)
  return sorted(out)


def circles() -> list[list[str]]:
  """Cycles among the modules' imports (each found once, from its smallest name)."""
  graph = {m: sorted(imports(m)) for m in modules()}
  out, index, low, stack, on_stack = [], {}, {}, [], set()

  def visit(v):  # Tarjan's strongly connected components
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in graph[v]:
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        out.append(sorted(component))

  sys.setrecursionlimit(10000)
  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def _functions_taking(type_name: str, package: str) -> list[str]:
  out = []
  for module, path in modules().items():
    if not _under(module, package):
      continue
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        if any(a.annotation is not None and type_name in ast.unparse(a.annotation)
               for a in args):
          out.append(f"{module}.{node.name}")
  return out


def _calls(name: str) -> list[str]:
  """Call sites of `name` in mlmjax: a function (`plan(...)`, `x.plan(...)`) or a dotted tail
  (`Assembly.of` matches `assembly.Assembly.of(...)`)."""
  out = []
  for module, path in modules().items():
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
      if isinstance(node, ast.Call) and ("." + ast.unparse(node.func)).endswith("." + name):
        out.append(f"{module}:{node.lineno}")
  return out


def main() -> None:
  steps = [m for m in reached("mlmjax.training.core.steps") if not is_package(m)]
  data = [m for m in modules() if _under(m, "mlmjax.data") and not is_package(m)]
  among = sum(len([t for t in imports(m) if _under(t, "mlmjax.data")]) for m in data)
  print(f"modules importing mlmjax.training.core.steps loads: {len(steps)}, of data/:"
        f" {len([m for m in steps if _under(m, 'mlmjax.data')])}")
  print(f"functions in training/ taking RunSettings:"
        f" {len(_functions_taking('RunSettings', 'mlmjax.training'))}, the assembled run:"
        f" {len(_functions_taking('Assembly', 'mlmjax.training'))}")
  print(f"call sites planning the phases: plan(...) {len(_calls('plan'))},"
        f" Assembly.of(...) {len(_calls('Assembly.of'))}")
  packages = [m for m in modules() if _under(m, "mlmjax.data") and is_package(m)]
  print(f"data/: {len(data)} modules in {len(packages)} packages, {among} imports among them")
  print(f"upward imports: {len(upward_imports())}, circles: {len(circles())},"
        f" modules no docstring names: {len(unlisted())}")


if __name__ == "__main__":
  main()
