"""Text from a masked-diffusion encoder: start from [MASK]s and unmask them step by step, as
LLaDA samples (Nie et al. 2025, section 2.4 and its reference generate.py).

At each step the model predicts every masked position at once; a few of the predictions are
kept, the rest masked again for the next step. The sampling's settings:

  steps           forward passes in all, shared evenly by the blocks
  block_length    semi-autoregressive sampling: the masked positions, in column order, in blocks
                  of this many, unmasked block after block (0: one block, all positions at once)
  remasking       which predictions a step keeps: 'low_confidence' (LLaDA: those the model gives
                  the highest probability) or 'random'
  temperature     0: the most likely token at each position; > 0: sampled at this temperature
                  (Gumbel-max), so each seed gives other text
  seed            the draws of temperature sampling and random remasking: same seed, same text
  threshold       0: the fixed schedule below; > 0: Fast-dLLM's confidence-aware parallel
                  decoding (Wu et al. 2025): each step keeps every masked position of the
                  block whose prediction the model gives at least this probability, and at
                  least the surest one; `steps` is then unused, each block taking as many steps
                  as its predictions need (at most one per position)

On the fixed schedule each step of a block keeps an even share of the block's masked
positions, the remainder in its first steps, so every block (and the whole text) is unmasked
after its steps. Special tokens are never generated. The model is a function
`logits_fn(ids [B, L]) -> logits [B, L, V]`.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable

import numpy as np

from mlmjax.errors import UserError
from mlmjax.models import special_ids

REMASKING = ("low_confidence", "random")


@dataclasses.dataclass(frozen=True)
class Sampling:
  """How text is unmasked (the module docstring says what each does)."""

  steps: int
  block_length: int = 0
  remasking: str = "low_confidence"
  temperature: float = 0.0
  seed: int = 0
  threshold: float = 0.0

  def __post_init__(self):
    if self.steps < 1:
      raise UserError(f"--steps={self.steps} must be >= 1")
    if self.block_length < 0:
      raise UserError(f"--block_length={self.block_length} must be >= 0 (0: one block)")
    if self.remasking not in REMASKING:
      raise UserError(f"--remasking={self.remasking!r} is not one of {', '.join(REMASKING)}")
    if not self.temperature >= 0:
      raise UserError(f"--temperature={self.temperature} must be >= 0 (0: the most likely"
                      " token)")
    if not 0 <= self.threshold < 1:
      raise UserError(f"--threshold={self.threshold} must be in [0, 1) (0: the fixed schedule"
                      " of --steps)")
    if self.threshold and self.remasking != "low_confidence":
      raise UserError(f"--threshold needs --remasking=low_confidence: {self.remasking}"
                      " remasking gives no confidence to compare with it")


def rows(encoded: list[list[int]], length: int, limit: int) -> np.ndarray:
  """[B, L] ids to unmask from texts encoded as [CLS] ... [SEP] (a [MASK] where a token is to
  be filled): a text without [MASK] (a prompt, or nothing) gets `length` of them before its
  [SEP]; each row [PAD]ded to the longest, which must hold at most `limit` tokens."""
  encoded = [ids if special_ids.MASK_ID in ids else
             ids[:-1] + [special_ids.MASK_ID] * length + ids[-1:] for ids in encoded]
  longest = max(map(len, encoded))
  if longest > limit:
    raise UserError(f"a text with what it generates is {longest} tokens; this model takes at"
                    f" most {limit}: shorten it or lower --length")
  out = np.full((len(encoded), longest), special_ids.PAD_ID, np.int32)
  for i, ids in enumerate(encoded):
    out[i, :len(ids)] = ids
  return out


def shown(decode: Callable[[list[int]], str], ids: np.ndarray, filled_at: np.ndarray) -> str:
  """A generated row as text (`decode`: the tokenizer's), each run of generated tokens in
  [brackets]."""
  keep = ids >= special_ids.NUM_SPECIAL
  groups = itertools.groupby(zip(ids[keep], filled_at[keep] >= 0), key=lambda t: t[1])
  return " ".join(("[{}]" if generated else "{}").format(
      decode([int(token) for token, _ in group])) for generated, group in groups)


def even_shares(total: np.ndarray, parts: int) -> np.ndarray:
  """[..., parts]: `total` split into `parts` counts as even as can be, the remainder going to
  the first parts (LLaDA's get_num_transfer_tokens)."""
  total = np.asarray(total)[..., None]
  return total // parts + (np.arange(parts) < total % parts)


def generate(logits_fn: Callable[[np.ndarray], np.ndarray], ids: np.ndarray,
             sampling: Sampling) -> tuple[np.ndarray, np.ndarray]:
  """ids [B, L] with [MASK] where text is to be generated -> (the ids with every [MASK]
  filled, the step at which each position was filled [B, L], -1 where it was given)."""
  ids = np.array(ids)
  masked = ids == special_ids.MASK_ID
  rng = np.random.default_rng(sampling.seed)
  # Block of each masked position: its rank among its row's masked positions, by block_length.
  rank = np.cumsum(masked, axis=1) - 1
  size = sampling.block_length or max(int(masked.sum(axis=1).max()), 1)
  block = np.where(masked, rank // size, -1)
  num_blocks = int(block.max()) + 1
  if num_blocks > sampling.steps and not sampling.threshold:
    raise UserError(f"--steps={sampling.steps} is fewer than the {num_blocks} blocks of"
                    f" --block_length={sampling.block_length}: each block needs a step")
  filled_at = np.full(ids.shape, -1, np.int64)
  step = 0
  for b, block_steps in enumerate(even_shares(sampling.steps, num_blocks)):
    in_block = block == b
    # No more steps than the block has positions: a step that fills nothing changes nothing.
    block_steps = max(min(int(block_steps), int(in_block.sum(axis=1).max())), 1)
    shares = even_shares(in_block.sum(axis=1), block_steps)  # [B, block_steps]
    for s in itertools.count():
      open_ = in_block & (ids == special_ids.MASK_ID)
      if not open_.any():  # after block_steps steps on the fixed schedule
        break
      prediction, confidence = _predict(logits_fn(ids), sampling, rng)
      confidence = np.where(open_, confidence, -np.inf)
      # Each row's open positions by confidence (place 0: the surest).
      place = np.argsort(np.argsort(-confidence, axis=1, kind="stable"), axis=1)
      if sampling.threshold:  # those the model is that sure of, and at least the surest
        keep = open_ & ((confidence >= sampling.threshold) | (place == 0))
      else:  # the shares[:, s] surest
        keep = open_ & (place < shares[:, s:s + 1])
      ids = np.where(keep, prediction, ids)
      filled_at[keep] = step
      step += 1
  return ids, filled_at


def _predict(logits: np.ndarray, sampling: Sampling,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  """The token predicted at every position [B, L] and how much to trust it [B, L]."""
  logits = np.array(logits, np.float32)
  logits[..., :special_ids.NUM_SPECIAL] = -np.inf  # never [PAD], [CLS], [SEP], [MASK], [UNK]
  if sampling.temperature > 0:
    # Gumbel-max in float64: LLaDA reports that lower precision degrades sampled text.
    gumbel = -np.log(-np.log(rng.uniform(np.finfo(np.float64).tiny, 1.0, logits.shape)))
    prediction = np.argmax(logits / sampling.temperature + gumbel, axis=-1)
  else:
    prediction = np.argmax(logits, axis=-1)
  if sampling.remasking == "random":
    return prediction, rng.uniform(size=prediction.shape)
  top = logits.max(axis=-1, keepdims=True)
  chosen = np.take_along_axis(logits, prediction[..., None], axis=-1)[..., 0]
  # The model's probability of its prediction: softmax, shifted by the largest logit.
  return prediction, np.exp(chosen - top[..., 0]) / np.exp(logits - top).sum(axis=-1)
