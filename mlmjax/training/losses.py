"""MLM loss and metrics as (sum, count) pairs, so they add up over devices, hosts and batches."""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp

from mlmjax.models import bert
from mlmjax.models import special_ids


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """-log softmax(logits)[label] in float32, shaped like `labels`."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  return -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]


# The scalar sums a train/eval step returns; they add up over steps (see summarize).
SUM_KEYS = ("mlm_loss_sum", "mlm_correct", "mlm_count", "nsp_loss_sum", "nsp_correct",
            "nsp_count", "mask_token_correct", "mask_token_count", "sbo_loss_sum", "sbo_correct",
            "rtd_loss_sum", "rtd_count", "rtd_correct", "rtd_replaced", "rtd_predicted",
            "rtd_true_positive", "clm_loss_sum", "clm_correct", "clm_count",
            "diffusion_bound_sum", "diffusion_token_count")


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


def model_sums(outputs: dict[str, jax.Array], batch: dict[str, jax.Array],
               with_shown_ids: bool = False) -> dict[str, jax.Array]:
  """All loss/metric sums of a model's outputs on a batch (MLM, plus NSP/SOP if present)."""
  shown_bp = None
  if with_shown_ids:
    shown_bp = jnp.take_along_axis(batch["input_ids"], batch["masked_positions"], axis=1)
  sums = mlm_sums(outputs["mlm_logits"], batch["masked_ids"], batch["masked_weights"], shown_bp)
  if "masked_rates" in batch:
    sums.update(diffusion_bound_sum=diffusion_bound_sum(
        outputs["mlm_logits"], batch["masked_ids"], batch["masked_weights"],
        batch["masked_rates"]), diffusion_token_count=maskable_tokens(batch))
  if "nsp_logits" in outputs:
    sums.update(nsp_sums(outputs["nsp_logits"], batch["nsp_labels"]))
  if "rtd_logits" in outputs:
    sums.update(rtd_sums(outputs["rtd_logits"], outputs["rtd_labels"],
                         (batch["segment_ids"] > 0).astype(jnp.float32)))
  if "sbo_logits" in outputs:  # the same targets, predicted from the span's boundaries
    sbo = mlm_sums(outputs["sbo_logits"], batch["masked_ids"], batch["masked_weights"])
    sums.update(sbo_loss_sum=sbo["mlm_loss_sum"], sbo_correct=sbo["mlm_correct"])
  return sums


def chunked_model_sums(outputs: dict[str, jax.Array], batch: dict[str, jax.Array], chunk: int,
                       per_token_loss: bool = False) -> dict[str, jax.Array]:
  """model_sums (and per_token_sums with `per_token_loss`) of a model that gave its MLM head's
  features at the slots (bert.py's masked_features, objective.logits_chunk): the decoder
  applied `chunk` slots at a time (chunked_sums)."""
  keys = [k for k in ("masked_ids", "masked_weights", "masked_rates") if k in batch]

  def of_chunk(logits_bcv, slots):
    ids, weights = slots["masked_ids"], slots["masked_weights"]
    out = mlm_sums(logits_bcv, ids, weights)
    if "masked_rates" in slots:
      out["diffusion_bound_sum"] = diffusion_bound_sum(logits_bcv, ids, weights,
                                                       slots["masked_rates"])
    if per_token_loss:
      out.update(per_token_sums(logits_bcv, ids, weights))
    return out

  sums = chunked_sums(outputs["mlm_features"], outputs["decoder"], outputs["decoder_bias"],
                      {k: batch[k] for k in keys}, of_chunk, chunk)
  if "masked_rates" in batch:
    sums["diffusion_token_count"] = maskable_tokens(batch)
  if "nsp_logits" in outputs:
    sums.update(nsp_sums(outputs["nsp_logits"], batch["nsp_labels"]))
  return sums


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


def total_loss(sums: dict[str, jax.Array], objective) -> jax.Array:
  """Mean cross-entropy per masked token of the global batch (never divides by zero), or
  under diffusion with objective.diffusion_loss 'inverse_rate' the bound per maskable token, plus
  the mean NSP/SOP cross-entropy per row when the model has that head (BERT's sum), plus
  `objective.span_boundary_weight` x the mean span-boundary cross-entropy (SpanBERT: 1), plus
  `objective.discriminator_weight` x ELECTRA's mean replaced-token-detection loss per token.
  The causal-LM objective's sums (causal_lm.py) make its mean next-token loss alone."""
  if "clm_loss_sum" in sums:
    return sums["clm_loss_sum"] / jnp.maximum(sums["clm_count"], 1.0)
  mlm_count = jnp.maximum(sums["mlm_count"], 1.0)
  loss = sums["mlm_loss_sum"] / mlm_count
  if "diffusion_bound_sum" in sums and objective.diffusion_loss == "inverse_rate":
    loss = sums["diffusion_bound_sum"] / jnp.maximum(sums["diffusion_token_count"], 1.0)
  if "nsp_loss_sum" in sums:
    loss = loss + sums["nsp_loss_sum"] / jnp.maximum(sums["nsp_count"], 1.0)
  if "sbo_loss_sum" in sums:
    loss = loss + objective.span_boundary_weight * sums["sbo_loss_sum"] / mlm_count
  if "rtd_loss_sum" in sums:
    loss = loss + objective.discriminator_weight * sums["rtd_loss_sum"] / jnp.maximum(
        sums["rtd_count"], 1.0)
  return loss


def summarize(sums: dict[str, float]) -> dict[str, float]:
  """Host-side: accumulated sums -> the metrics people read (loss, accuracy, perplexity). The
  causal-LM objective's `loss` is its next-token loss (also `clm_loss`, with `clm_accuracy`);
  the diffusion objective's is MLM's mean per target, its bound `diffusion_bound` (nats per
  maskable token) and `bits_per_token`."""
  if "clm_count" in sums:
    count = max(float(sums["clm_count"]), 1.0)
    loss = float(sums["clm_loss_sum"]) / count
    return {"loss": loss, "clm_loss": loss, "clm_accuracy": float(sums["clm_correct"]) / count,
            "perplexity": math.exp(min(loss, 69.0))}
  count = max(float(sums["mlm_count"]), 1.0)
  loss = float(sums["mlm_loss_sum"]) / count
  out = {
      "loss": loss,
      "mlm_accuracy": float(sums["mlm_correct"]) / count,
      "perplexity": math.exp(min(loss, 69.0)),  # capped near 1e30: no overflow
  }
  if "nsp_count" in sums:
    nsp_count = max(float(sums["nsp_count"]), 1.0)
    out["nsp_loss"] = float(sums["nsp_loss_sum"]) / nsp_count
    out["nsp_accuracy"] = float(sums["nsp_correct"]) / nsp_count
  if "rtd_count" in sums:
    ratio = lambda a, b: float(sums[a]) / max(float(sums[b]), 1.0)
    out.update(rtd_loss=ratio("rtd_loss_sum", "rtd_count"),
               rtd_accuracy=ratio("rtd_correct", "rtd_count"),
               rtd_precision=ratio("rtd_true_positive", "rtd_predicted"),
               rtd_recall=ratio("rtd_true_positive", "rtd_replaced"),
               rtd_replaced_fraction=ratio("rtd_replaced", "rtd_count"))
  if "sbo_loss_sum" in sums:
    out["sbo_loss"] = float(sums["sbo_loss_sum"]) / count
    out["sbo_accuracy"] = float(sums["sbo_correct"]) / count
  if "mask_token_count" in sums:
    out["mask_token_accuracy"] = float(sums["mask_token_correct"]) / max(
        float(sums["mask_token_count"]), 1.0)
  if "diffusion_token_count" in sums:  # the bound per maskable token, in nats and in bits
    bound = float(sums["diffusion_bound_sum"]) / max(float(sums["diffusion_token_count"]), 1.0)
    out.update(diffusion_bound=bound, bits_per_token=bound / math.log(2.0))
  return out
