"""ELECTRA (Clark et al., 2020): replaced-token detection, trained jointly with a small MLM.

    masked input -> shared embeddings -> generator (a narrower encoder) -> MLM logits at the
    masked slots -> one sampled token per slot (Gumbel-max; no gradient flows through it)
    -> the input with those slots replaced -> shared embeddings -> discriminator -> per token:
    replaced or original?

The discriminator learns from every non-padding token, not only the masked 15%: ELECTRA's
answer to MLM's inefficiency. Loss = generator MLM + lambda x discriminator binary
cross-entropy (objective.discriminator_weight, ELECTRA: 50). The generator has the
discriminator's depth and `objective.generator_fraction` of its width, heads and MLP (ELECTRA:
1/4 to 1/3); both read the same token, position and type embeddings (width
`model.embedding_size`, projected to each tower's width where it differs). A sampled token
equal to the original counts as original, as in the paper; special tokens are never sampled.
After pretraining the discriminator is the model (export, fine-tuning: `encode`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from mlmjax.errors import ConfigError
from mlmjax.models import batch_schema
from mlmjax.models import bert as model_lib
from mlmjax.models import compile_target
from mlmjax.models import layers
from mlmjax.models import special_ids
from mlmjax.models.settings import ModelSettings


def generator_settings(model: ModelSettings, fraction: float) -> ModelSettings:
  """The generator's settings: the discriminator's with width, heads and MLP scaled by
  `fraction` (objective.generator_fraction, checked here; dataclasses.replace checks the
  rest as for any settings)."""
  width, heads = round(model.hidden_size * fraction), max(1, round(model.num_heads * fraction))
  if not 0 < fraction <= 1 or width < 1 or width % heads:
    raise ConfigError(f"objective.generator_fraction={fraction} must be in (0, 1] and give a"
                      f" generator width ({width}) divisible by its heads ({heads})")
  return dataclasses.replace(model, hidden_size=width, num_heads=heads,
                             intermediate_size=round(model.intermediate_size * fraction))


class Tower(nnx.Module, model_lib.LayerStack):
  """An encoder stack over the shared embeddings (projected when the widths differ)."""

  def __init__(self, cfg: ModelSettings, width: int, rngs: nnx.Rngs, name: str,
               target: compile_target.Target | None):
    d = cfg.hidden_size
    self.projection = (layers.Dense(rngs, (width, d), ("embed", None), cfg.initializer_range)
                       if width != d else None)
    self.init_stack(cfg, rngs, f"{name}/blocks", target)

  def __call__(self, x, batch, dropout_key=None, constrain_layer=None):
    if self.projection is not None:
      x = self.projection(x)
    return self.run_stack(x, batch, dropout_key, constrain_layer)


class ElectraForPretraining(nnx.Module, model_lib.Embeddings):

  def __init__(self, cfg: ModelSettings, generator_fraction: float, vocab_size: int,
               rngs: nnx.Rngs, target: compile_target.Target | None = None):
    width = cfg.embedding_size or cfg.hidden_size
    std, bias = cfg.initializer_range, cfg.use_bias
    self.init_embeddings(cfg, vocab_size, width, rngs, target)
    gen = generator_settings(cfg, generator_fraction)
    self.generator = Tower(gen, width, rngs, "generator", target)
    # The generator's MLM head maps back to the embedding width for the tied decoder.
    self.mlm_transform = layers.Dense(rngs, (gen.hidden_size, width), ("embed", None), std, bias)
    self.mlm_norm = layers.LayerNorm(width, cfg, target)
    self.mlm_bias = layers.param(None, (vocab_size,), ("vocab",), "zeros")
    self.discriminator = Tower(cfg, width, rngs, "discriminator", target)
    d = cfg.hidden_size
    self.rtd_dense = layers.Dense(rngs, (d, d), ("embed", None), std, bias)
    self.rtd_out = layers.Dense(rngs, (d, 1), ("embed", None), std, bias)

  def _rtd_logits(self, hidden_btd) -> jax.Array:
    """[B, T] float32: the discriminator head (dense, GELU, dense to one logit per token)."""
    h = jax.nn.gelu(self.rtd_dense(hidden_btd), approximate=False)
    return self.rtd_out(h)[..., 0].astype(jnp.float32)

  def encode(self, batch, dropout_key=None, constrain_layer=None):
    """The discriminator's [B, T, D] hidden states of the (uncorrupted) input: what export and
    fine-tuning use."""
    keys = (None, None) if dropout_key is None else jax.random.split(dropout_key)
    return self.discriminator(self.embed(batch, keys[0]), batch, keys[1], constrain_layer)

  def __call__(self, batch, dropout_key=None, constrain_layer=None) -> dict[str, jax.Array]:
    """`mlm_logits` [B, P, V] (the generator's); with `masked_ids` in the batch also
    `rtd_input_ids` [B, T] (the discriminator's input), `rtd_logits` [B, T] (its float32
    logits) and `rtd_labels` [B, T] (1: replaced)."""
    batch_schema.require(batch, ["masked_positions"])
    keys = [None] * 4 if dropout_key is None else list(jax.random.split(dropout_key, 4))
    hidden = self.generator(self.embed(batch, keys[0]), batch, keys[1], constrain_layer)
    logits_bpv = model_lib.mlm_logits(model_lib.gather(hidden, batch["masked_positions"]),
                                      self.mlm_transform, self.mlm_norm,
                                      self.token_embedding[...], self.mlm_bias[...])
    out = {"mlm_logits": logits_bpv}
    if "masked_ids" not in batch:  # fill-mask and export checks: judge the input as it is
      out["rtd_logits"] = self._rtd_logits(self.encode(batch))
      return out
    # Eval (no key) samples with a fixed key, so held-out metrics are the same every time.
    sample_key = jax.random.fold_in(
        jax.random.PRNGKey(0) if dropout_key is None else dropout_key, 0x5A17)
    gumbel = -jnp.log(-jnp.log(jax.random.uniform(sample_key, logits_bpv.shape,
                                                  minval=1e-20, maxval=1.0)))
    special = jnp.arange(logits_bpv.shape[-1]) < special_ids.NUM_SPECIAL
    sampled = jnp.argmax(jnp.where(special, -jnp.inf, jax.lax.stop_gradient(logits_bpv))
                         + gumbel, axis=-1).astype(batch["input_ids"].dtype)
    real = batch["masked_weights"] > 0
    rows = jnp.arange(sampled.shape[0])[:, None]
    positions = batch["masked_positions"]
    ids = batch["input_ids"]
    original = ids.at[rows, positions].set(jnp.where(real, batch["masked_ids"],
                                                     ids[rows, positions]))
    corrupted = ids.at[rows, positions].set(jnp.where(real, sampled, ids[rows, positions]))
    corrupted_batch = {**batch, "input_ids": corrupted}
    hidden = self.discriminator(self.embed(corrupted_batch, keys[2]), corrupted_batch, keys[3],
                                constrain_layer)
    out["rtd_input_ids"] = corrupted
    out["rtd_logits"] = self._rtd_logits(hidden)
    out["rtd_labels"] = (corrupted != original).astype(jnp.float32)
    return out
