"""Fill-mask predictions of a pretraining run: each [MASK] of a text predicted as one token."""

from __future__ import annotations

import jax
import numpy as np

from mlmjax import errors
from mlmjax.models import special_ids
from mlmjax.training import finished_run

MASK_TEXT = finished_run.MASK_TEXT


class Predictor:
  """The trained model of `workdir` (its checkpoint `step`, default the latest), loaded once on
  one device."""

  def __init__(self, workdir: str, step: int | None = None):
    run = finished_run.load(workdir, step)
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
