"""The documentation: the mkdocs site builds in strict mode (a broken link or anchor fails),
and no text in the repository names a path that does not exist."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The repository's top-level folders that text names paths under: `mlmjax/data/corpora/sources.py`,
# `configs/bert.py:large`, `launch/`, a glob such as `configs/*.py`.
_TOP = r"(?:mlmjax|configs|launch|tests|benchmarks|docs)"
# The library's sub-packages, named without `mlmjax/` where the context makes it clear
# (`training/planning/phases.py` in configs/base.py, `parallel/hlo.py` in docs/performance.md).
_PACKAGES = r"(?:data|training|models|parallel|hf|finetuning)"
# Not preceded by a path character, so `x/mlmjax/y` and URLs are not read as ours.
_START = r"(?<![\w./*-])"
_TOP_PATH = re.compile(_START + r"(" + _TOP + r"/[\w./*-]*)")
_PACKAGE_FILE = re.compile(_START + r"(" + _PACKAGES + r"/[\w/]*\w\.(?:py|txtpb))\b")
# The text of these files is read; everything in them counts (docstrings, comments, prose).
_SUFFIXES = {".md", ".py", ".sh", ".ipynb", ".sbatch", ".yml", ".cfg", ".ini"}
# Build outputs, environments and run folders, not the project's text.
_SKIP_DIRS = {"build", "dist", "site", "runs", "venv", "__pycache__", "node_modules"}


def _text_files():
  for folder, dirs, files in os.walk(ROOT):
    dirs[:] = [d for d in dirs if not (d.startswith(".") or d in _SKIP_DIRS
                                       or d.endswith(".egg-info")
                                       or (folder == str(ROOT) and d == "data"))]
    for name in files:
      if pathlib.Path(name).suffix in _SUFFIXES:
        yield pathlib.Path(folder, name)


def _exists(path: str) -> bool:
  if "*" in path:
    return any(ROOT.glob(path.rstrip("/")))
  return (ROOT / path).exists()


def _missing(path: str) -> bool:
  # Tests name paths that must not exist to check the errors about them: `configs/nosuch.py`.
  if "nosuch" in path:
    return False
  # launch/ scripts work in a checkout the workers hold in ~/mlmjax: `mlmjax/launch/worker.sh`
  # is this repository's launch/worker.sh, and `mlmjax/.git` that checkout's git folder (not a
  # file of the repository: .ci/newest_jax tests a copy that has none).
  if path.startswith("mlmjax/.git"):
    return False
  if path.startswith("mlmjax/launch/"):
    path = path[len("mlmjax/"):]
  return not _exists(path)


def named_paths(text: str) -> set[str]:
  """The repository paths `text` names: top-level ones as written (a trailing full stop left
  out), sub-package ones under mlmjax/."""
  found = {m.rstrip(".") for m in _TOP_PATH.findall(text)}
  found |= {"mlmjax/" + m for m in _PACKAGE_FILE.findall(text)}
  return found


def test_named_paths_reads_what_text_names():
  text = ("See `mlmjax/data/corpora/sources.py`, configs/bert.py:large and launch/. Rules in "
          "training/planning/phases.py; not https://x.org/mlmjax/nothing.py nor runs/tiny/x.py; "
          "globs: configs/*.py")
  assert named_paths(text) == {"mlmjax/data/corpora/sources.py", "configs/bert.py", "launch/",
                               "mlmjax/training/planning/phases.py", "configs/*.py"}
  # Built from parts, so that this file does not name them itself.
  gone = [top + rest for top, rest in (("mlmjax", "/attention.py"), ("configs", "/*.txt"),
                                       ("docs", "/api/"))]
  assert [p for p in gone if _missing(p)] == gone
  assert not [p for p in ("mlmjax/data/", "tests/", "configs/*.py", "mlmjax/launch/tpu.sh",
                          "configs/nosuch.py") if _missing(p)]


def test_every_named_path_exists():
  stale = {}
  for file in _text_files():
    text = file.read_text(encoding="utf-8", errors="replace")
    for path in named_paths(text):
      if _missing(path):
        stale.setdefault(path, []).append(str(file.relative_to(ROOT)))
  assert not stale, "paths named in the text that do not exist:\n" + "\n".join(
      f"  {p}  <- {', '.join(sorted(files))}" for p, files in sorted(stale.items()))


def test_docs_site_builds_strict_and_readme_links_resolve(tmp_path):
  site = tmp_path / "site"
  result = subprocess.run(
      [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
       str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
      cwd=ROOT, capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stderr[-4000:]
  # README.md is not part of the site (mkdocs checks the links between pages): its links into
  # docs/ must name a page, and a section that page has.
  broken = []
  for page, anchor in re.findall(r"\]\(docs/([\w-]+)\.md(?:#([\w-]+))?\)",
                                 (ROOT / "README.md").read_text(encoding="utf-8")):
    html = site / ("index.html" if page == "index" else f"{page}/index.html")
    if not html.exists() or (anchor and f'id="{anchor}"' not in html.read_text("utf-8")):
      broken.append(f"docs/{page}.md#{anchor}")
  assert not broken, f"README.md links to missing pages or sections: {broken}"
