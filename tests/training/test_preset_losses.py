"""Every preset's train losses and metrics over its first 20 steps at tiny shapes (and its
held-out metrics after them), against those recorded in preset_losses.json: a change of the
code's structure (the objectives, the assembly, the phases, the input) that means to move no
result keeps every one of them.

    MLMJAX_RECORD_PRESET_LOSSES=1 python -m pytest tests/training/test_preset_losses.py
                                   # records them (then commit the file)

Each preset keeps its recipe (objective, heads, masking, data format, phases and their
objectives, optimizer) at a model of 2 layers 32 wide, rows of 32 tokens (64 where a phase's
are longer), 8 rows a step and 5 warm-up steps; the runs are one child process on one CPU
device. At the jax version they were recorded with, every metric must be equal to 1e-5 (the
same program on another CPU may round differently; here they are bit-identical); at another,
whose compiler fuses differently, the losses to 1e-2 (an accuracy may move by a whole token).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, user_env

HERE = os.path.dirname(os.path.abspath(__file__))
RECORD = os.path.join(HERE, "preset_losses.json")
PRESETS = ["base", "tiny", "bert:base", "wwm:base", "mosaicbert:base", "roberta:base",
           "spanbert:base", "electra:small", "modernbert:base", "biphasic:base",
           "diffusion:base"]
STEPS = 20
# What a step's metrics row records of its results (and every eval/ metric): not its times.
RESULTS = ("step", "loss", "mlm_accuracy", "perplexity", "nsp_loss", "nsp_accuracy", "sbo_loss",
           "sbo_accuracy", "rtd_loss", "rtd_accuracy", "rtd_precision", "rtd_recall",
           "rtd_replaced_fraction", "clm_loss", "clm_accuracy", "diffusion_bound",
           "bits_per_token", "learning_rate", "grad_norm", "skipped_steps")


def shrunk(preset: str, tokenizer_path: str):
  """The preset's config at the tiny shapes of the module docstring."""
  from mlmjax import presets  # pylint: disable=g-import-not-at-top
  config = presets.load("config", preset)
  seq = lambda n: 32 if n <= 128 else 64
  slots = lambda n, length: max(1, round(n * seq(length) / length))
  config.tokenizer.path = tokenizer_path
  m = config.model
  m.num_layers, m.hidden_size, m.num_heads, m.intermediate_size = 2, 32, 2, 64
  m.max_position_embeddings = 64
  if m.local_attention_window:
    m.local_attention_window = 16
  config.masking.max_predictions_per_seq = slots(config.masking.max_predictions_per_seq,
                                                 config.data.seq_len)
  config.data.seq_len = seq(config.data.seq_len)

  def phase(entry):  # its length and slots shrunk, its batch size the run's
    opts = {k: v for k, v in (entry[3] if len(entry) > 3 else {}).items() if k != "batch_size"}
    return (entry[0], seq(entry[1]), slots(entry[2], entry[1])) + ((opts,) if opts else ())
  config.train.phases = tuple(map(phase, config.train.phases))
  t = config.train
  t.batch_size, t.steps, t.log_every_steps = 8, STEPS, 1
  config.optimizer.warmup_steps = 5
  t.eval_every_steps = t.checkpoint_every_steps = STEPS
  t.eval_batches, t.fit, t.grad_accum_steps = 1, "off", 1
  return config


def losses(tokenizer_path: str, workdir: str) -> dict:
  """{preset: [the train loss of each step]} and the jax version, trained here."""
  import jax  # pylint: disable=g-import-not-at-top
  from mlmjax.training import train  # pylint: disable=g-import-not-at-top
  out = {"jax": jax.__version__, "losses": {}}
  for preset in PRESETS:
    run = os.path.join(workdir, preset.replace(":", "_"))
    train.train_and_evaluate(shrunk(preset, tokenizer_path), run)
    rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    out["losses"][preset] = [{k: v for k, v in r.items() if k in RESULTS or k.startswith("eval/")}
                             for r in rows]
  return out


_CHILD = """
import json, sys
from absl import flags
flags.FLAGS.mark_as_parsed()
from mlmjax.parallel import plugins
plugins.hide()
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/.."]  # this file, and tests/ (conftest.py)
import test_preset_losses
print(json.dumps(test_preset_losses.losses(sys.argv[2], sys.argv[3])))
"""


def _trained(tokenizer_path: str, workdir: str) -> dict:
  proc = subprocess.run([sys.executable, "-c", _CHILD, HERE, tokenizer_path, workdir], cwd=REPO,
                        env=user_env(), capture_output=True, text=True, timeout=1200,
                        check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.slow  # 11 short runs in a child process
def test_every_preset_trains_as_recorded(tokenizer_path, tmp_path):
  now = _trained(tokenizer_path, str(tmp_path))
  if os.environ.get("MLMJAX_RECORD_PRESET_LOSSES"):
    with open(RECORD, "w", encoding="utf-8") as f:
      json.dump(now, f, indent=1)
  recorded = json.load(open(RECORD, encoding="utf-8"))
  assert list(now["losses"]) == list(recorded["losses"]) == PRESETS
  same_jax = now["jax"] == recorded["jax"]
  for preset in PRESETS:
    rows, wanted = now["losses"][preset], recorded["losses"][preset]
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, STEPS + 1)), preset
    assert [sorted(r) for r in rows] == [sorted(r) for r in wanted], preset  # the same metrics
    for row, want in zip(rows, wanted):
      for key in want if same_jax else [k for k in want if "loss" in k]:
        np.testing.assert_allclose(row[key], want[key], rtol=1e-5 if same_jax else 1e-2,
                                   atol=1e-7, err_msg=f"{preset} step {want['step']} {key}")
