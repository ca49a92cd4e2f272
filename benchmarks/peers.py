"""mlmjax against its peers on the same CPU and the same work: tokens/s of a training step.

  python benchmarks/peers.py --size=mini [--steps=10] [--only=mlmjax,hf_flax,torch,torch_bf16]

Every system trains the same BERT (vocab 8000, float32 unless noted) with AdamW on the same
synthetic batch: rows of 128 tokens, 20 masked slots per row (15% of 126), dropout 0.1 on
hidden states and attention probabilities (BERT's defaults; --dropout=0 turns both off).
  mlmjax      this repository's jitted train step (masked-only MLM head)
  hf_flax     transformers' FlaxBertForMaskedLM (4.57, the last with Flax), optax.adamw,
              loss on the masked slots of full-vocabulary logits (the HF Flax MLM recipe)
  torch       BertForMaskedLM in eager PyTorch, torch.optim.AdamW
  torch_bf16  the same under torch.compile with bfloat16 autocast
Needs the [hf] extra (transformers, torch). Prints one JSON line per system: median and best
step time over --steps timed steps after 3 warm-up steps, and tokens/s at the median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

SIZES = {"mini": dict(layers=4, hidden=256, heads=4, mlp=1024, batch=32),
         "base": dict(layers=12, hidden=768, heads=12, mlp=3072, batch=8)}
VOCAB, SEQ, PREDICTIONS = 8000, 128, 20


def _batch(batch: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, VOCAB, (batch, SEQ)).astype(np.int32)
  positions = np.sort(np.stack([rng.choice(np.arange(1, SEQ - 1), PREDICTIONS, replace=False)
                                for _ in range(batch)]), 1).astype(np.int32)
  targets = np.take_along_axis(ids, positions, 1)
  np.put_along_axis(ids, positions, 4, 1)  # [MASK]
  return ids, positions, targets


def _time(step, steps: int) -> dict:
  for _ in range(3):
    step()
  times = []
  for _ in range(steps):
    t = time.perf_counter()
    step()
    times.append(time.perf_counter() - t)
  return {"step_ms_median": 1e3 * statistics.median(times), "step_ms_min": 1e3 * min(times)}


def run_mlmjax(size, steps, dropout):
  sys.path.insert(0, ".")
  import jax  # pylint: disable=g-import-not-at-top
  from mlmjax.configs import bert  # pylint: disable=g-import-not-at-top
  from mlmjax.parallel import sharding  # pylint: disable=g-import-not-at-top
  from mlmjax.training import assembly  # pylint: disable=g-import-not-at-top
  from mlmjax.training.run_settings import RunSettings  # pylint: disable=g-import-not-at-top
  s = SIZES[size]
  config = bert.get_config("base")
  config.data.format = "full_sentences"
  config.model.update(num_layers=s["layers"], hidden_size=s["hidden"], num_heads=s["heads"],
                      intermediate_size=s["mlp"], dropout_rate=dropout,
                      attention_dropout_rate=dropout)
  config.data.seq_len, config.train.batch_size = SEQ, s["batch"]
  config.masking.max_predictions_per_seq = PREDICTIONS
  config.mesh.shape = (1, 1, 1)
  settings = RunSettings.from_config(config)
  mesh = sharding.make_mesh(settings.mesh, jax.devices()[:1])
  run = assembly.Assembly.of(settings)
  setup = run.setup(VOCAB, mesh)
  train_step = run.train_step(setup)
  ids, positions, targets = _batch(s["batch"])
  batch = sharding.to_device({
      "input_ids": ids, "segment_ids": np.ones_like(ids),
      "positions": np.tile(np.arange(SEQ, dtype=np.int32), (len(ids), 1)),
      "token_type_ids": np.zeros_like(ids), "masked_positions": positions,
      "masked_ids": targets, "masked_weights": np.ones(positions.shape, np.float32)}, mesh)
  state = [setup.init_fn()]

  def step():
    state[0], m = train_step(state[0], batch)
    jax.block_until_ready(m)
  return _time(step, steps)


def run_hf_flax(size, steps, dropout):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from transformers import BertConfig, FlaxBertForMaskedLM  # pylint: disable=g-import-not-at-top
  s = SIZES[size]
  model = FlaxBertForMaskedLM(_hf_config(BertConfig, s, dropout), seed=0)
  tx = optax.adamw(1e-4, weight_decay=0.01)
  ids, positions, targets = _batch(s["batch"])
  labels = np.full(ids.shape, -100, np.int32)
  np.put_along_axis(labels, positions, targets, 1)
  weights = (labels >= 0).astype(np.float32)

  @jax.jit
  def train_step(params, opt_state, key):
    def loss_fn(params):
      logits = model(ids, params=params, dropout_rng=key, train=True).logits
      logp = jax.nn.log_softmax(logits, -1)
      nll = -jnp.take_along_axis(logp, np.maximum(labels, 0)[..., None], -1)[..., 0]
      return (nll * weights).sum() / weights.sum()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  carry = [model.params, tx.init(model.params), jax.random.PRNGKey(0)]

  def step():
    carry[2], key = jax.random.split(carry[2])
    carry[0], carry[1], loss = train_step(carry[0], carry[1], key)
    jax.block_until_ready(loss)
  return _time(step, steps)


def _hf_config(cls, s, dropout):
  return cls(vocab_size=VOCAB, hidden_size=s["hidden"], num_hidden_layers=s["layers"],
             num_attention_heads=s["heads"], intermediate_size=s["mlp"],
             hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
             max_position_embeddings=512)


def run_torch(size, steps, dropout, compiled_bf16=False):
  import torch  # pylint: disable=g-import-not-at-top
  from transformers import BertConfig, BertForMaskedLM  # pylint: disable=g-import-not-at-top
  torch.manual_seed(0)
  s = SIZES[size]
  model = BertForMaskedLM(_hf_config(BertConfig, s, dropout)).train()
  opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
  ids, positions, targets = _batch(s["batch"])
  labels = np.full(ids.shape, -100, np.int64)
  np.put_along_axis(labels, positions, targets, 1)
  ids_t, labels_t = torch.as_tensor(ids, dtype=torch.long), torch.as_tensor(labels)
  forward = torch.compile(model) if compiled_bf16 else model

  def step():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=compiled_bf16):
      loss = forward(input_ids=ids_t, labels=labels_t).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
  return _time(step, steps)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--size", choices=SIZES, default="mini")
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--dropout", type=float, default=0.1)
  parser.add_argument("--only", default="mlmjax,hf_flax,torch,torch_bf16")
  args = parser.parse_args()
  runners = {"mlmjax": run_mlmjax, "hf_flax": run_hf_flax, "torch": run_torch,
             "torch_bf16": lambda *a: run_torch(*a, compiled_bf16=True)}
  tokens = SIZES[args.size]["batch"] * SEQ
  for name in args.only.split(","):
    out = runners[name](args.size, args.steps, args.dropout)
    out.update(system=name, size=args.size, dropout=args.dropout,
               tokens_per_sec=tokens / (out["step_ms_median"] / 1e3))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
  main()
