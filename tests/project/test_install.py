"""mlmjax as a wheel, not a checkout: built from the files setup.py packages, installed into a
folder of its own, run from folders that hold no checkout but a `configs` folder of the user's
(which must not shadow mlmjax's presets). A preset by name trains and resumes; evaluate and
predict read the run back (its config onto the installed mlmjax/configs/base.py)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, user_env

pytestmark = pytest.mark.slow  # builds a wheel, trains in subprocesses


def _pip(*args, cwd):
  proc = subprocess.run([sys.executable, "-m", "pip", *args, "--no-deps", "--no-build-isolation",
                         "--disable-pip-version-check", "--quiet"], cwd=cwd, capture_output=True,
                        text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
  """A folder holding mlmjax installed from a wheel (PYTHONPATH), and the wheel."""
  tmp = tmp_path_factory.mktemp("wheel")
  source = tmp / "source"  # what an sdist holds, so that the build writes nothing into REPO
  source.mkdir()
  for name in ("setup.py", "README.md"):
    shutil.copy(os.path.join(REPO, name), source / name)
  for name in ("mlmjax", "configs"):  # symlinks=True: mlmjax/configs stays a link, as in git
    shutil.copytree(os.path.join(REPO, name), source / name, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
  _pip("wheel", "-w", str(tmp / "dist"), str(source), cwd=tmp)
  wheel, = (tmp / "dist").glob("mlmjax-*.whl")
  target = tmp / "site"
  _pip("install", "--target", str(target), str(wheel), cwd=tmp)
  return target, wheel


def _run(installed, cwd, *args):
  target, _ = installed
  env = {**user_env(), "PYTHONPATH": str(target)}
  return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=600, check=False)


def test_the_wheel_holds_the_package_and_the_presets(installed):
  import zipfile  # pylint: disable=g-import-not-at-top
  _, wheel = installed
  names = zipfile.ZipFile(wheel).namelist()
  assert "mlmjax/cli.py" in names and "mlmjax/configs/bert.py" in names
  assert "mlmjax/configs/base.py" in names and "mlmjax/parallel/gpu_specs/h100.txtpb" in names
  # nothing but mlmjax: no top-level `configs` package in site-packages
  assert {n.split("/")[0] for n in names} == {"mlmjax", "mlmjax-0.1.0.dist-info"}


def test_a_preset_by_name_trains_resumes_evaluates_and_predicts_from_the_wheel(
    installed, tmp_path, tokenizer_path):
  """What the README shows, from folders with no checkout in them but a user's `configs`
  folder: a package (`__init__.py`) where it trains, a plain folder where it reads the run."""
  target, _ = installed
  elsewhere, reader = tmp_path / "elsewhere", tmp_path / "reader"
  for folder in (elsewhere, reader):  # a user's configs/ whose tiny.py and base.py break
    (folder / "configs").mkdir(parents=True)
    for name in ("tiny.py", "base.py"):
      (folder / "configs" / name).write_text("raise ImportError('the user configs/ was read')\n")
  (elsewhere / "configs" / "__init__.py").write_text("")
  where = _run(installed, elsewhere, "-c", "import mlmjax.configs; from mlmjax import presets;"
               " print(mlmjax.configs.__file__); print(presets.names())")
  assert where.stdout.splitlines() == [
      str(target / "mlmjax" / "configs" / "__init__.py"),
      "['base', 'bert', 'biphasic', 'diffusion', 'electra', 'modernbert', 'mosaicbert',"
      " 'roberta', 'spanbert', 'tiny', 'wwm']"], where.stderr
  run = str(tmp_path / "run")
  common = ["-m", "mlmjax.main", "--config=tiny", f"--workdir={run}",
            f"--config.tokenizer.path={tokenizer_path}", "--config.model.num_layers=1",
            "--config.train.log_every_steps=2", "--config.train.eval_every_steps=4",
            "--config.train.eval_batches=1", "--config.train.checkpoint_every_steps=4"]
  first = _run(installed, elsewhere, *common, "--config.train.steps=4")
  assert first.returncode == 0, first.stderr[-3000:]
  assert "Starting from scratch" in first.stderr and "step 4/4 | loss" in first.stderr
  assert "constant_baseline_accuracy" in first.stderr and "mask_token_accuracy" in first.stderr
  for name in ("config.json", "tokenizer.model", "metrics.jsonl", "checkpoints/4"):
    assert os.path.exists(os.path.join(run, name)), name
  assert os.listdir(os.path.join(run, "tensorboard"))
  rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
  assert [r["step"] for r in rows if "loss" in r] == [2, 4]
  assert [r["step"] for r in rows if "eval/mlm_accuracy" in r] == [4]

  second = _run(installed, elsewhere, *common, "--config.train.steps=6")
  assert second.returncode == 0, second.stderr[-3000:]
  assert "Resumed from checkpoint at step 4" in second.stderr and "step 6/6 | loss" in second.stderr
  assert os.path.exists(os.path.join(run, "checkpoints/6"))

  evaluate = _run(installed, reader, "-m", "mlmjax.evaluate", f"--workdir={run}",
                  "--batches=1")
  assert evaluate.returncode == 0, evaluate.stderr[-3000:]
  result = json.loads(evaluate.stdout)
  assert result["step"] == 6 and 0 <= result["mlm_accuracy"] <= 1

  predict = _run(installed, reader, "-m", "mlmjax.predict", f"--workdir={run}", "--top_k=3",
                 "In the beginning God created the [MASK] and the earth.")
  assert predict.returncode == 0, predict.stderr[-3000:]
  lines = predict.stdout.splitlines()
  assert lines[0] == f"checkpoint step 6 of {run}"
  assert lines[1] == "In the beginning God created the [MASK] and the earth."
  assert lines[2].startswith("  [MASK] 1: ") and lines[2].count("(") == 3
