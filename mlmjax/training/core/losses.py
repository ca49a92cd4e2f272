"""Losses and metrics as (sum, count) pairs, so they add up over devices, hosts and batches: the
parts each objective (objectives/) and fine-tuning kind composes its loss of."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from mlmjax.models import bert
from mlmjax.models import special_ids


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """-log softmax(logits)[label] in float32, shaped like `labels`."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  return -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]


def mlm_sums(logits_bpv: jax.Array, masked_ids_bp: jax.Array, masked_weights_bp: jax.Array,
             shown_ids_bp: jax.Array | None = None) -> dict[str, jax.Array]:
  """Sums over every masked slot of the (global) batch; padding slots have weight 0.

  With `shown_ids_bp` (the input tokens at the masked slots) also counts the slots whose input
  really was [MASK]: the 10% of targets left unchanged can be copied from the input, so the
  overall accuracy flatters a model that ignores context.
  """
  xent_bp = cross_entropy(logits_bpv, masked_ids_bp)
  correct_bp = (jnp.argmax(logits_bpv, axis=-1) == masked_ids_bp).astype(jnp.float32)
  sums = {
      "mlm_loss_sum": jnp.sum(xent_bp * masked_weights_bp),
      "mlm_correct": jnp.sum(correct_bp * masked_weights_bp),
      "mlm_count": jnp.sum(masked_weights_bp),
  }
  if shown_ids_bp is not None:
    on_mask_bp = (shown_ids_bp == special_ids.MASK_ID) * masked_weights_bp
    sums["mask_token_correct"] = jnp.sum(correct_bp * on_mask_bp)
    sums["mask_token_count"] = jnp.sum(on_mask_bp)
  return sums


def diffusion_bound_sum(logits_bpv: jax.Array, masked_ids_bp: jax.Array,
                        masked_weights_bp: jax.Array, masked_rates_bp: jax.Array) -> jax.Array:
  """Masked diffusion's variational bound on the negative log-likelihood (MDLM, Sahoo et al.
  2024, eq. 10; LLaDA, Nie et al. 2025, eq. 3), summed: each target's cross-entropy over the
  mask rate of its document (padding slots have weight 0 and rate 0)."""
  xent_bp = cross_entropy(logits_bpv, masked_ids_bp)
  return jnp.sum(xent_bp * masked_weights_bp / jnp.maximum(masked_rates_bp, 1e-6))


def maskable_tokens(batch: dict[str, jax.Array]) -> jax.Array:
  """The tokens of a diffusion batch the masker could mask: not padding, not special."""
  ids = batch["input_ids"]
  maskable = (batch["segment_ids"] > 0) & ((ids >= special_ids.NUM_SPECIAL)
                                            | (ids == special_ids.MASK_ID))
  return jnp.sum(maskable.astype(jnp.float32))


def per_token_sums(logits_bpv: jax.Array, masked_ids_bp: jax.Array,
                   masked_weights_bp: jax.Array) -> dict[str, jax.Array]:
  """Loss sum and count per target vocabulary id, [V] each (adaptive masking's feedback)."""
  xent_bp = cross_entropy(logits_bpv, masked_ids_bp)
  zeros_v = jnp.zeros(logits_bpv.shape[-1], jnp.float32)
  return {"token_loss_sum": zeros_v.at[masked_ids_bp].add(xent_bp * masked_weights_bp),
          "token_count": zeros_v.at[masked_ids_bp].add(masked_weights_bp)}


def nsp_sums(logits_b2: jax.Array, labels_b: jax.Array) -> dict[str, jax.Array]:
  """NSP/SOP sums over the rows of the (global) batch: every row carries one label."""
  xent_b = cross_entropy(logits_b2, labels_b)
  return {
      "nsp_loss_sum": jnp.sum(xent_b),
      "nsp_correct": jnp.sum((jnp.argmax(logits_b2, axis=-1) == labels_b).astype(jnp.float32)),
      "nsp_count": jnp.asarray(labels_b.shape[0], jnp.float32),
  }


def rtd_sums(logits_bt: jax.Array, labels_bt: jax.Array,
             weights_bt: jax.Array) -> dict[str, jax.Array]:
  """ELECTRA's replaced-token detection over the (non-padding) tokens of the batch: sigmoid
  cross-entropy of 'replaced' (label 1) vs 'original', and the counts behind accuracy,
  precision and recall of 'replaced'."""
  logits = logits_bt.astype(jnp.float32)
  xent = jnp.maximum(logits, 0) - logits * labels_bt + jnp.log1p(jnp.exp(-jnp.abs(logits)))
  predicted = (logits > 0).astype(jnp.float32)
  return {"rtd_loss_sum": jnp.sum(xent * weights_bt), "rtd_count": jnp.sum(weights_bt),
          "rtd_correct": jnp.sum((predicted == labels_bt) * weights_bt),
          "rtd_replaced": jnp.sum(labels_bt * weights_bt),
          "rtd_predicted": jnp.sum(predicted * weights_bt),
          "rtd_true_positive": jnp.sum(predicted * labels_bt * weights_bt)}


def chunked_sums(features_bpd: jax.Array, decoder_vd: jax.Array, bias_v: jax.Array,
                 arrays: dict[str, jax.Array], sums_of: Callable, chunk: int
                 ) -> dict[str, jax.Array]:
  """sums_of(logits [B, chunk, V], the arrays' [B, chunk] slices) added up over the positions
  of `features_bpd`, `chunk` at a time, each chunk's logits made by the tied decoder under
  jax.checkpoint: the backward pass makes them again, so a step holds [B, chunk, V] logits,
  never [B, P, V] (at 1,024 positions of 50,368 ids, 206 MB a row in float32). Positions past
  P (the last chunk's padding) get zeros in the arrays: give them weight 0 there."""
  width = min(chunk, features_bpd.shape[1])
  pad = -features_bpd.shape[1] % width

  def chunks(x):  # [B, P, ...] -> [P' / width, B, width, ...]
    x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
    return jnp.moveaxis(x.reshape(x.shape[0], -1, width, *x.shape[2:]), 1, 0)

  @jax.checkpoint
  def one(xs):
    features, slices = xs
    return sums_of(bert.decode(features, decoder_vd, bias_v), slices)

  def add(total, xs):
    return jax.tree.map(jnp.add, total, one(xs)), None

  xs = (chunks(features_bpd), {k: chunks(v) for k, v in arrays.items()})
  zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype),
                       jax.eval_shape(one, jax.tree.map(lambda x: x[0], xs)))
  return jax.lax.scan(add, zeros, xs)[0]
