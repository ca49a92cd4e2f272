"""Presets by name (mlmjax/presets.py): every preset and variant loads by its name as by its
file; a path wins over a name; an override that train.phases would ignore is refused unless
train.phases is overridden too. (Each command's one-line errors: test_command_lines.py.)"""

import os
import subprocess
import sys

import pytest

import command_lines
from conftest import REPO, user_env
from mlmjax.configs import base
from mlmjax.configs import bert
from mlmjax import errors
from mlmjax import presets

# Every preset with each of its variants (none: get_config takes no argument).
ALL = [("base", None), ("tiny", None), ("biphasic", "base"), ("diffusion", "base"),
       ("electra", "small"),
       ("modernbert", "base"), ("roberta", "large"), *[(n, s) for n in
                                                       ("bert", "spanbert", "wwm", "mosaicbert")
                                                       for s in bert.SIZES]]


def test_the_names_are_the_files_of_configs():
  assert presets.names() == sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "configs"))
                                   if f.endswith(".py") and f != "__init__.py")
  assert {n for n, _ in ALL} == set(presets.names())
  assert os.path.samefile(presets.folder(), os.path.join(REPO, "configs"))


@pytest.mark.parametrize("package", [False, True])
def test_a_configs_folder_where_a_command_runs_does_not_shadow_the_presets(tmp_path, package):
  """mlmjax's presets are `mlmjax.configs`: a user's configs/ (a plain folder or a package,
  its tiny.py broken) is not theirs. (From a wheel: tests/project/test_install.py.)"""
  (tmp_path / "configs").mkdir()
  (tmp_path / "configs" / "tiny.py").write_text("raise ImportError('the user configs/ was read')\n")
  if package:
    (tmp_path / "configs" / "__init__.py").write_text("")
  proc = subprocess.run(
      [sys.executable, "-c", "from mlmjax import presets; print(presets.names());"
       " print(presets.load('config', 'tiny').model.num_layers)"],
      cwd=tmp_path, env=user_env(), capture_output=True, text=True, timeout=120, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.splitlines() == [str(presets.names()), "4"]


@pytest.mark.parametrize("name,variant", ALL)
def test_a_preset_by_name_is_its_file(name, variant):
  given = name + (f":{variant}" if variant else "")
  path = os.path.join(presets.folder(), f"{name}.py")
  assert presets.resolve(given) == path + (f":{variant}" if variant else "")
  by_name = presets.load("config", given)
  by_file = presets.load("config", f"configs/{name}.py" + (f":{variant}" if variant else ""))
  assert by_name.to_dict() == by_file.to_dict()


def test_a_path_or_an_unknown_name_stays_as_given(tmp_path, monkeypatch):
  assert presets.resolve("configs/bert.py:base") == "configs/bert.py:base"
  assert presets.resolve("nosuch:base") == "nosuch:base"
  mine = tmp_path / "tiny"  # a file of the user's that happens to share a preset's name
  mine.write_text(
      "from mlmjax.configs import tiny\n\ndef get_config():\n  return tiny.get_config()\n")
  monkeypatch.chdir(tmp_path)
  assert presets.resolve("tiny") == "tiny"


def _phased(*phases):
  config = base.get_config()
  config.train.phases = phases
  return config


@pytest.mark.parametrize("phases,overrides,refused", [
    (((0.9, 128, 20), (0.1, 512, 80)), ["data.seq_len"], "data.seq_len"),
    (((0.9, 128, 20), (0.1, 512, 80)), ["train.steps", "masking.max_predictions_per_seq"],
     "masking.max_predictions_per_seq"),
    (((0.9, 128, 20), (0.1, 512, 80)), ["data.seq_len", "train.phases"], None),  # theirs decide
    ((), ["data.seq_len", "masking.max_predictions_per_seq"], None),  # no phases: applied
    (((0.5, 128, 20, {"batch_size": 64}), (0.5, 128, 20, {"batch_size": 128})),
     ["train.batch_size"], "train.batch_size"),  # every phase names its batch size
    (((0.5, 128, 20, {"batch_size": 64}), (0.5, 128, 20)), ["train.batch_size"], None),
    (((0.5, 128, 20, {"mask_rate": 0.3}), (0.5, 128, 20, {"mask_rate": 0.15})),
     ["masking.mask_rate"], "masking.mask_rate"),
])
def test_an_override_the_phases_would_ignore_is_refused(phases, overrides, refused):
  message = presets.ignored_overrides(_phased(*phases), {k: None for k in overrides})
  if refused is None:
    assert message is None
  else:
    assert message.startswith(f"--config.{refused} would be ignored: train.phases={phases}"
                              " decides it for every phase; set --config.train.phases instead")


def test_phases_given_with_the_length_apply_on_the_command_line():
  """The refused override's two ways out, as the message gives them, both parse."""
  lines = [["mlmjax.main", "--config=bert:tiny", "--workdir=/dev/null/run", *more,
            "--only_check_args"] for more in (
                ["--config.data.seq_len=1024", "--config.train.phases=((1.0, 1024, 154),)"],
                ["--config.data.seq_len=256", "--config.train.phases=()"])]
  for out in command_lines.run(lines, env=user_env()):
    assert (out.returncode, out.stderr) == (0, ""), out


def test_a_preset_refusing_its_variant_is_a_command_line_error():
  with pytest.raises(errors.CommandLineError, match=r"^--config=bert:huge: unknown BERT size"
                     r" 'huge'; choose one of tiny, mini, small, medium, base, large$"):
    presets.load("config", "bert:huge")


def test_a_file_whose_get_config_needs_a_variant_says_so(tmp_path):
  mine = tmp_path / "mine.py"
  mine.write_text("def get_config(size):\n  return None\n")
  with pytest.raises(errors.CommandLineError,
                     match=rf"^--config={mine}: {mine} needs a variant \({mine}:VARIANT\)$"):
    presets.load("config", str(mine))
