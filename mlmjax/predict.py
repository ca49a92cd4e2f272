"""Fill-mask queries against the latest checkpoint of a run.

  python -m mlmjax.predict --workdir=runs/tiny "In the beginning God created the [MASK] and the earth."

Each [MASK] is predicted as one sentencepiece piece; the top-k pieces and their probabilities
are printed per mask.
"""

from __future__ import annotations

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order


from absl import flags
import jax
import numpy as np

from mlmjax import cli
from mlmjax import errors
from mlmjax.models import special_ids
from mlmjax.training import finished_run
from mlmjax.training import metrics

MASK_TEXT = finished_run.MASK_TEXT

_WORKDIR = flags.DEFINE_string("workdir", None, "A training run's workdir.")
_TOP_K = flags.DEFINE_integer("top_k", 5, "How many fills to show per [MASK].")


class Predictor:
  """The trained model of `workdir`, loaded once on one device."""

  def __init__(self, workdir: str):
    run = finished_run.load(workdir)
    self.model, self.tok, self.step = run.settings.model, run.tokenizer, run.step
    self.forward, self.encode = run.forward, run.encode_masked

  def fill_mask(self, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """Per [MASK] in `text`, the top-k (piece, probability) fills."""
    ids = self.encode(text)
    limit = self.model.max_position_embeddings
    if len(ids) > limit:
      raise errors.UserError(f"text is {len(ids)} tokens; this model takes at most {limit}")
    positions = [i for i, t in enumerate(ids) if t == special_ids.MASK_ID]
    if not positions:
      raise errors.UserError(f"no {MASK_TEXT} in {text!r}")
    n = len(ids)
    batch = {
        "input_ids": np.asarray([ids], np.int32),
        "segment_ids": np.ones((1, n), np.int32),
        "positions": np.arange(n, dtype=np.int32)[None],
        "token_type_ids": np.zeros((1, n), np.int32),
        "masked_positions": np.asarray([positions], np.int32),
    }
    probs = np.asarray(jax.nn.softmax(self.forward(batch)["mlm_logits"][0], axis=-1))  # [P, V]
    out = []
    for p in probs:
      best = np.argsort(-p)[:top_k]
      out.append([(self.tok.id_to_piece(i).replace("\u2581", ""), float(p[i])) for i in best])
    return out


def main(argv):
  texts = argv[1:]
  if not texts:
    raise errors.CommandLineError(f"give at least one text with {MASK_TEXT}, e.g."
                                  f' "the {MASK_TEXT} of God"')
  metrics.quiet_library_logs()
  predictor = Predictor(_WORKDIR.value)
  print(f"checkpoint step {predictor.step} of {_WORKDIR.value}")
  for text in texts:
    print(text)
    for i, fills in enumerate(predictor.fill_mask(text, _TOP_K.value)):
      print(f"  {MASK_TEXT} {i + 1}: " + "  ".join(f"{piece} ({p:.3f})" for piece, p in fills))


if __name__ == "__main__":
  cli.run(main, required=("workdir",), arguments=True)
