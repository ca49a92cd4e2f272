"""Fill-mask from a workdir: a trained model's predictions, and clear errors."""

import pytest

from mlmjax.configs import tiny
from conftest import train_on_one_device
from mlmjax import errors
from mlmjax.inference import fill_mask as predict

pytestmark = pytest.mark.slow  # every test uses a model trained for 500 steps

DOCUMENT = ("And the LORD spake unto Moses, saying, Speak unto the people. And the king went"
            " up to his house. In the beginning God created the heaven and the earth.")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tokenizer_path):
  """A small model trained on a corpus of a few sentences until it knows them."""
  root = tmp_path_factory.mktemp("predict")
  (root / "corpus.txt").write_text("\n\n".join([DOCUMENT] * 60), encoding="utf-8")
  config = tiny.get_config()
  config.data.source = str(root / "corpus.txt")
  config.tokenizer.path = tokenizer_path
  config.data.seq_len = 32
  config.masking.max_predictions_per_seq = 10
  config.model.update(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128)
  config.train.update(steps=500, batch_size=16, eval_every_steps=500, eval_batches=2,
                      checkpoint_every_steps=500, log_every_steps=100)
  config.optimizer.update(warmup_steps=20, learning_rate=2e-3)
  return train_on_one_device(config, str(root / "run"))


def test_fill_mask_gives_what_the_model_learned(trained):
  predictor = predict.Predictor(trained)
  assert predictor.step == 500
  fills = predictor.fill_mask("And the LORD spake unto [MASK], saying,", top_k=3)
  assert len(fills) == 1 and len(fills[0]) == 3
  # Far above chance (1/4096) and above the runner-up ("spake", the word the mask follows).
  # (0.34 with the tests' unoptimised compilation, conftest.py; over 0.4 optimised.)
  assert fills[0][0][0] == "Moses" and fills[0][0][1] > 0.2, fills
  fills = predictor.fill_mask("In the beginning God created the [MASK] and the earth.")
  assert fills[0][0][0] == "heaven", fills


def test_fill_mask_errors(trained, tmp_path):
  predictor = predict.Predictor(trained)
  with pytest.raises(errors.UserError, match="no \\[MASK\\] in 'no mask here'"):
    predictor.fill_mask("no mask here")
  with pytest.raises(errors.UserError, match="holds no training run"):
    predict.Predictor(str(tmp_path))
