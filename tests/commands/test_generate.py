"""Generation from a masked-diffusion run (inference/unmasking.py, python -m mlmjax.generate):
no [MASK] left, the prompt and the given text of an infill unchanged, LLaDA's low-confidence rule
checked against the model's own probabilities, blocks filled left to right in even shares,
tokens sampled at the temperature, and the same text from the same seed. The tests of a trained
model (30 steps) are slow; those of made-up logits are not."""

import re

import numpy as np
import pytest

import command_lines
from conftest import micro, user_env
from mlmjax.errors import UserError
from mlmjax.models import special_ids
from mlmjax.inference import unmasking
from mlmjax.training import finished_run
from mlmjax.training import train

MASK = special_ids.MASK_ID


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tokenizer_path):
  """A tiny diffusion run of 30 steps: enough for predictions that differ by position."""
  config = micro(tokenizer_path)
  config.objective.kind = "diffusion"
  config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)
  config.train.update(steps=30, eval_every_steps=30, checkpoint_every_steps=30)
  path = str(tmp_path_factory.mktemp("generate") / "run")
  train.train_and_evaluate(config, path)
  return path


@pytest.fixture(scope="module")
def clm_workdir(tmp_path_factory, tokenizer_path):
  """A micro causal-LM run of 8 steps: the reference that scores generated text."""
  config = micro(tokenizer_path)
  config.objective.kind = "clm"
  path = str(tmp_path_factory.mktemp("generate") / "clm")
  train.train_and_evaluate(config, path)
  return path


@pytest.fixture(scope="module")
def run(workdir):
  return finished_run.load(workdir)


def _rows(run, texts, length, num_samples):
  """What the command unmasks for these texts (or num_samples from nothing)."""
  return unmasking.rows([run.encode_masked(t) for t in texts or [""] * num_samples], length,
                        run.settings.model.max_position_embeddings)


def test_the_shares_of_a_block_are_as_even_as_can_be():
  np.testing.assert_array_equal(unmasking.even_shares(10, 4), [3, 3, 2, 2])
  np.testing.assert_array_equal(unmasking.even_shares(np.array([2, 8]), 3),
                                [[1, 1, 0], [3, 3, 2]])


@pytest.mark.slow  # a model trained for 30 steps
def test_from_nothing_from_a_prompt_and_infilling_keep_what_is_given(run):
  ids = _rows(run, ["", "In the beginning God", "And God [MASK] [MASK] the light"], 6, 1)
  out, filled_at = unmasking.generate(run.mlm_logits, ids, unmasking.Sampling(steps=6))
  assert not (out == MASK).any()
  given = ids != MASK
  np.testing.assert_array_equal(out[given], ids[given])  # prompt, infill text, [CLS] [SEP] [PAD]
  assert np.array_equal(filled_at >= 0, ~given)
  assert (out[~given] >= special_ids.NUM_SPECIAL).all()  # no special token generated
  assert [int(n) for n in (~given).sum(axis=1)] == [6, 6, 2]
  assert unmasking.shown(run.tokenizer.decode, out[2], filled_at[2]).startswith("And God [")


def test_each_step_keeps_the_predictions_the_model_is_surest_of():
  """LLaDA's low-confidence remasking, by hand: 6 masked positions whose most likely token
  (id 10 + position) has the probability the logit margin gives it; 6 in 3 steps keeps the 2
  surest first, then the next 2, whichever order they sit in."""
  ids = np.array([[special_ids.CLS_ID] + [MASK] * 6 + [special_ids.SEP_ID]])
  margin = {1: 0.5, 2: 3.0, 3: 1.0, 4: 4.0, 5: 2.0, 6: 0.25}  # by position

  def logits_fn(x):
    logits = np.zeros((1, 8, 32), np.float32)
    for j, m in margin.items():
      logits[0, j, 10 + j] = m  # the others 0: probability e^m / (e^m + 26)
    return logits

  out, filled_at = unmasking.generate(logits_fn, ids, unmasking.Sampling(steps=3))
  assert filled_at[0].tolist() == [-1, 2, 0, 1, 0, 1, 2, -1]
  assert out[0, 1:7].tolist() == [11, 12, 13, 14, 15, 16]


def test_a_threshold_keeps_every_prediction_that_sure_and_at_least_the_surest():
  """Fast-dLLM's parallel decoding by hand. Row 0: the margins of the test above, whose
  probabilities e^m / (e^m + 26) are 0.060, 0.436, 0.095, 0.677, 0.221, 0.047 at positions 1-6;
  at 0.3 the first step keeps the two over it (4 and 2), then none is, and each step keeps the
  surest left (5, 3, 1, 6). Row 1: every position at 0.85: all in the first step. The rows
  share the model's calls: 5, for 12 tokens."""
  ids = np.array([[special_ids.CLS_ID] + [MASK] * 6 + [special_ids.SEP_ID]] * 2)
  margins = [{1: 0.5, 2: 3.0, 3: 1.0, 4: 4.0, 5: 2.0, 6: 0.25}, dict.fromkeys(range(1, 7), 5.0)]
  calls = []

  def logits_fn(x):
    calls.append(x.copy())
    assert len(calls) <= 6, "a step kept nothing"  # at least one a step: 6 calls at most
    logits = np.zeros((2, 8, 32), np.float32)
    for row, margin in enumerate(margins):
      for j, m in margin.items():
        logits[row, j, 10 + j] = m
    return logits

  sampling = unmasking.Sampling(steps=3, threshold=0.3)
  out, filled_at = unmasking.generate(logits_fn, ids, sampling)
  assert filled_at.tolist() == [[-1, 3, 0, 2, 0, 1, 4, -1], [-1, 0, 0, 0, 0, 0, 0, -1]]
  assert len(calls) == 5 and (out[:, 1:7] == np.arange(11, 17)).all()
  # A block is finished before the next begins, on as many steps as it takes: blocks of 3.
  calls.clear()
  _, filled_at = unmasking.generate(logits_fn, ids, unmasking.Sampling(
      steps=1, block_length=3, threshold=0.3))
  assert filled_at.tolist() == [[-1, 2, 0, 1, 3, 4, 5, -1], [-1, 0, 0, 0, 3, 3, 3, -1]]


def test_a_threshold_needs_the_model_s_confidence():
  with pytest.raises(UserError) as e:
    unmasking.Sampling(steps=4, threshold=0.9, remasking="random")
  assert str(e.value) == ("--threshold needs --remasking=low_confidence: random remasking gives"
                          " no confidence to compare with it")
  with pytest.raises(UserError) as e:
    unmasking.Sampling(steps=4, threshold=1.0)
  assert str(e.value) == "--threshold=1.0 must be in [0, 1) (0: the fixed schedule of --steps)"


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_tokens_are_sampled_from_the_softmax_at_the_temperature(temperature):
  """Gumbel-max at temperature T draws token k with probability softmax(logits / T)_k. Logits
  0, 1, 2 for three tokens (the special ones never) at 20,000 masked positions filled in one
  step: at T = 0.5, softmax(0, 2, 4) = (0.016, 0.117, 0.867); at T = 2, softmax(0, 0.5, 1) =
  (0.186, 0.307, 0.506); each share within 5 standard errors. Ignoring the temperature
  draws softmax(0, 1, 2) = (0.090, 0.245, 0.665) at both, far outside."""
  rows, length = 4, 5000
  ids = np.full((rows, length + 2), MASK)
  ids[:, 0], ids[:, -1] = special_ids.CLS_ID, special_ids.SEP_ID
  tokens = special_ids.NUM_SPECIAL + np.arange(3)

  def logits_fn(x):
    logits = np.zeros(x.shape + (special_ids.NUM_SPECIAL + 3,), np.float32)
    logits[..., tokens] = [0.0, 1.0, 2.0]
    return logits

  out, filled_at = unmasking.generate(logits_fn, ids, unmasking.Sampling(
      steps=1, temperature=temperature, seed=0))
  assert (filled_at[:, 1:-1] == 0).all()
  share = np.array([(out[:, 1:-1] == t).mean() for t in tokens])
  e = np.exp(np.array([0.0, 1.0, 2.0]) / temperature)
  expected = e / e.sum()
  np.testing.assert_allclose(expected, {0.5: [0.016, 0.117, 0.867],
                                        2.0: [0.186, 0.307, 0.506]}[temperature], atol=1e-3)
  n = rows * length
  assert (np.abs(share - expected) < 5 * np.sqrt(expected * (1 - expected) / n)).all(), share


@pytest.mark.slow  # a model trained for 30 steps
@pytest.mark.parametrize("remasking", unmasking.REMASKING)
def test_blocks_are_filled_left_to_right(run, remasking):
  ids = _rows(run, [], 10, 2)
  sampling = unmasking.Sampling(steps=6, block_length=4, remasking=remasking)
  _, filled_at = unmasking.generate(run.mlm_logits, ids, sampling)
  masked = np.nonzero(ids[0] == MASK)[0]
  blocks = [filled_at[:, masked[i:i + 4]] for i in (0, 4, 8)]  # 4, 4 and 2 positions
  # 6 steps for 3 blocks: 2 each; a block's positions are all filled before the next begins.
  for b, block in enumerate(blocks):
    assert block.min() == 2 * b and block.max() == 2 * b + 1


@pytest.mark.slow  # a model trained for 30 steps
def test_a_seed_gives_the_same_text_and_another_seed_other_text(run):
  ids = _rows(run, [], 16, 3)

  def sample(seed):
    return unmasking.generate(run.mlm_logits, ids, unmasking.Sampling(
        steps=8, temperature=1.0, remasking="random", seed=seed))[0]
  np.testing.assert_array_equal(sample(1), sample(1))
  assert not np.array_equal(sample(1), sample(2))


@pytest.mark.slow  # a model trained for 30 steps
def test_bad_sampling_and_too_long_texts_are_one_line(run):
  with pytest.raises(UserError) as e:
    unmasking.generate(run.mlm_logits, _rows(run, [], 8, 1),
                       unmasking.Sampling(steps=1, block_length=4))
  assert str(e.value) == ("--steps=1 is fewer than the 2 blocks of --block_length=4: each block"
                          " needs a step")
  with pytest.raises(UserError) as e:
    _rows(run, ["In the beginning God"], 40, 1)
  length = len(run.encode_masked("In the beginning God")) + 40
  assert str(e.value) == (f"a text with what it generates is {length} tokens; this model takes"
                          " at most 32: shorten it or lower --length")


@pytest.mark.slow  # a model trained for 30 steps
def test_the_command_prints_each_text_and_its_speed_and_repeats_with_a_seed(workdir):
  line = ["mlmjax.generate", f"--workdir={workdir}", "--length=5", "--steps=5",
          "--temperature=1.0", "--seed=3", "In the beginning God", "And God [MASK] the light"]
  parallel = line[:4] + ["--threshold=0.2"] + line[6:]  # greedy, as many steps as it takes
  first, again, fast = command_lines.run([line, line, parallel], env=user_env())
  assert first.returncode == 0, first.stderr[-2000:]
  lines = first.stdout.splitlines()
  assert lines[0] == f"checkpoint step 30 of {workdir} (diffusion)"
  assert lines[1].startswith("In the beginning God [") and lines[1].endswith("]")
  assert lines[2].startswith("And God [") and lines[2].endswith("] the light")
  assert re.fullmatch(r"6 tokens in 5 steps, [0-9.]+ s: [0-9,]+ tokens/s", lines[3]), lines[3]
  assert again.stdout.splitlines()[:3] == lines[:3]
  assert fast.returncode == 0, fast.stderr[-2000:]
  steps = int(re.fullmatch(r"6 tokens in (\d) steps, .*", fast.stdout.splitlines()[3]).group(1))
  assert 1 <= steps <= 5  # each step keeps at least one of the longest text's 5 [MASK]s


@pytest.mark.slow  # two trained models
def test_a_causal_run_scores_each_token_from_the_ones_before_it(run, clm_workdir):
  """The reference's log-probabilities: a token's depends on the tokens before it, never on
  those after; sampled from left to right; a run trained on another objective is refused in
  one line."""
  reference = finished_run.load(clm_workdir)
  ids = _rows(run, ["In the beginning God created the heaven and the earth"], 0, 1)
  changed = ids.copy()
  changed[0, 6] = ids[0, 3]  # the 7th token
  before, after = reference.next_token_log_probs(ids), reference.next_token_log_probs(changed)
  assert before.shape == (1, ids.shape[1] - 1) and (before < 0).all()
  np.testing.assert_array_equal(before[0, :5], after[0, :5])  # tokens 2-6: only what precedes
  assert not np.array_equal(before[0, 5:], after[0, 5:])
  # Unmasked one position at a time, left to right, it samples from the reference: greedily,
  # each token the most likely after the ones before it.
  nothing = _rows(run, [], 10, 1)
  out, _ = unmasking.generate(reference.causal_log_probs, nothing,
                              unmasking.Sampling(steps=10, block_length=1))
  log_probs = reference.causal_log_probs(out)[0, 1:11, special_ids.NUM_SPECIAL:]
  assert out[0, 1:11].tolist() == (special_ids.NUM_SPECIAL + log_probs.argmax(-1)).tolist()
  with pytest.raises(UserError) as e:
    run.next_token_log_probs(ids)
  assert str(e.value) == ("the run's checkpoint of step 30 was trained on diffusion; scoring"
                          " text needs a causal-LM run (--config.objective.kind=clm)")


@pytest.mark.slow  # two trained models
def test_the_command_scores_what_it_generates(workdir, clm_workdir):
  line = ["mlmjax.generate", f"--workdir={workdir}", "--length=8", "--num_samples=3",
          "--temperature=1.0", f"--score={clm_workdir}"]
  scored, refused = command_lines.run([line, line[:-1] + [f"--score={workdir}"]],
                                      env=user_env())
  assert scored.returncode == 0, scored.stderr[-2000:]
  assert re.fullmatch(
      r"generative perplexity [0-9.]+ under " + re.escape(clm_workdir) + r" \(step 8\);"
      r" token entropy [0-9.]+ nats; repeated 4-grams [0-9.]+%", scored.stdout.splitlines()[-1])
  assert refused.returncode == 1
  assert refused.stderr.strip().splitlines()[-1] == (
      "error: the run's checkpoint of step 30 was trained on diffusion; scoring text needs a"
      " causal-LM run (--config.objective.kind=clm)")
