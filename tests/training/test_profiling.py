"""train.profile_steps: a tiny CPU run writes a jax.profiler trace that opens."""

import glob
import gzip
import json
import os

import pytest

from mlmjax import errors
from mlmjax.training import config_check
from mlmjax.training import train


@pytest.mark.slow
def test_a_run_writes_a_trace_of_the_steps_asked_for(micro_config, tmp_path):
  config = micro_config
  config.train.steps = 4
  config.train.profile_steps = "2:4"
  train.train_and_evaluate(config, str(tmp_path))
  runs = glob.glob(str(tmp_path / "profile" / "plugins" / "profile" / "*"))
  assert len(runs) == 1  # one trace, of steps 2 and 3
  assert glob.glob(os.path.join(runs[0], "*.xplane.pb"))  # TensorBoard's profile plugin
  with gzip.open(os.path.join(runs[0], "perfetto_trace.json.gz")) as f:
    events = json.load(f)["traceEvents"]
  names = {e.get("name", "") for e in events}
  # The jitted train step ran inside the trace (two of them: steps 2 and 3).
  assert sum(1 for e in events if "train_step" in e.get("name", "")) >= 2, sorted(names)[:50]


@pytest.mark.parametrize("spec", ["5", "0:3", "4:4", "a:b"])
def test_bad_profile_steps_are_a_config_error(micro_config, spec):
  micro_config.train.profile_steps = spec
  with pytest.raises(errors.ConfigError, match="train.profile_steps"):
    config_check.checked(micro_config)
