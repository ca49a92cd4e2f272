"""Fill-mask queries against the latest checkpoint of a run.

  python -m mlmjax.predict --workdir=runs/tiny "In the beginning God created the [MASK] and the earth."

Each [MASK] is predicted as one sentencepiece piece; the top-k pieces and their probabilities
are printed per mask (mlmjax/inference/fill_mask.py).
"""

from __future__ import annotations

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order


from absl import flags

from mlmjax import cli
from mlmjax import errors
from mlmjax.inference.fill_mask import MASK_TEXT, Predictor
from mlmjax.training.run import metrics

_WORKDIR = flags.DEFINE_string("workdir", None, "A training run's workdir.")
_TOP_K = flags.DEFINE_integer("top_k", 5, "How many fills to show per [MASK].")


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
