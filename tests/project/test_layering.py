"""The library's import structure, read from the source: imports run one way (the layering the
package docstrings state), no circles, every module named in its package's docstring, and the
jitted core free of the input pipeline."""

import subprocess
import sys

from project import code_graph


def test_no_import_runs_upward():
  assert code_graph.upward_imports() == []


def test_no_circles():
  assert code_graph.circles() == []


def test_every_module_is_named_in_its_package_docstring():
  assert code_graph.unlisted() == []


def test_the_layering_test_catches_an_upward_import(tmp_path, monkeypatch):
  """A module of models/ importing training/ (models' docstring allows none of it) is caught,
  as is a circle through it."""
  modules = dict(code_graph.modules())
  bad = tmp_path / "bad.py"
  bad.write_text("from mlmjax.training.core import steps\n")
  modules["mlmjax.models.bad"] = str(bad)
  monkeypatch.setattr(code_graph, "modules", lambda: modules)
  code_graph.imports.cache_clear()
  try:
    assert ("mlmjax.models.bad", "mlmjax.training.core.steps") in code_graph.upward_imports()
    assert "mlmjax.models.bad" in code_graph.unlisted()
    bad.write_text("from mlmjax.models import bert\n")
    code_graph.imports.cache_clear()
    modules["mlmjax.models.bert"] = str(tmp_path / "bert.py")
    (tmp_path / "bert.py").write_text("from mlmjax.models import bad\n")
    assert ["mlmjax.models.bad", "mlmjax.models.bert"] in code_graph.circles()
  finally:
    code_graph.imports.cache_clear()


def _data_modules_loaded_by(*modules: str) -> list[str]:
  """The mlmjax.data modules a fresh interpreter has loaded after importing `modules`."""
  code = (f"import sys\nimport {', '.join(modules)}\n"
          "print(sorted(m for m in sys.modules if m.startswith('mlmjax.data')))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True, cwd=code_graph.ROOT)
  return eval(out.stdout)  # pylint: disable=eval-used


def test_the_jitted_steps_and_the_finetuning_kinds_load_nothing_of_the_input_pipeline():
  assert _data_modules_loaded_by("mlmjax.training.core.steps") == []
  kinds = ["classification", "token_classification", "question_answering", "multiple_choice",
           "embeddings"]
  assert _data_modules_loaded_by(*(f"mlmjax.finetuning.{k}" for k in kinds)) == []
