"""Train steps on synthetic batches, on any mesh of the 8 fake devices: the small model, the
batches, the training loop and the HLO reader that the sharding, optimizer, Muon and model
tests share."""

import collections
import re

import jax
import numpy as np

from mlmjax.configs import base
from mlmjax.parallel import sharding
from mlmjax.training import assembly

VOCAB = 512


def small_config(mesh_shape=(-1, 1, 1)):
  """A 2-layer model whose sizes every mesh axis of 1, 2, 4 or 8 divides: hidden 64 (fsdp),
  8 heads of 8, MLP 128 and vocabulary 512 (tensor). Set from base.py, not a preset, so that
  tuning a preset does not move these numbers."""
  config = base.get_config()
  config.data.seq_len = 32
  config.masking.max_predictions_per_seq = 6
  config.model.hidden_size = 64
  config.model.num_layers = 2
  config.model.num_heads = 8
  config.model.intermediate_size = 128
  config.model.max_position_embeddings = 32
  config.model.dropout_rate = 0.0  # dropout differs per micro-batch; see the tests that use it
  config.model.attention_dropout_rate = 0.0
  config.train.batch_size = 16
  config.train.steps = 10
  config.optimizer.warmup_steps = 1
  config.optimizer.learning_rate = 1e-3
  config.mesh.shape = mesh_shape
  return config


def synthetic_batches(n, batch_size=16, seq_len=32, predictions=6, nsp=False, seed=0):
  """Host batches shaped like the pipeline's: two packed documents and padding per row, six
  masked slots (the last one padding in odd rows), [MASK] at the masked inputs."""
  rng = np.random.default_rng(seed)
  half, pad = seq_len // 2, 4
  segment_ids = np.array([1] * half + [2] * (seq_len - half - pad) + [0] * pad, np.int32)
  positions = np.concatenate([np.arange(half), np.arange(seq_len - half - pad), np.zeros(pad)])
  out = []
  for _ in range(n):
    ids = rng.integers(5, VOCAB, (batch_size, seq_len)).astype(np.int32)
    masked_positions = np.sort(np.stack([
        rng.choice(seq_len - pad, predictions, replace=False) for _ in range(batch_size)]), 1)
    masked_ids = np.take_along_axis(ids, masked_positions, 1)
    np.put_along_axis(ids, masked_positions, 4, 1)  # [MASK]
    weights = np.ones((batch_size, predictions), np.float32)
    weights[1::2, -1] = 0.0
    batch = {
        "input_ids": ids,
        "segment_ids": np.tile(segment_ids, (batch_size, 1)),
        "positions": np.tile(positions.astype(np.int32), (batch_size, 1)),
        "token_type_ids": np.tile((segment_ids == 2).astype(np.int32), (batch_size, 1)),
        "masked_positions": masked_positions.astype(np.int32),
        "masked_ids": masked_ids,
        "masked_weights": weights,
    }
    if nsp:
      batch["nsp_labels"] = rng.integers(0, 2, batch_size).astype(np.int32)
    out.append(batch)
  return out


def train(config, batches, devices=None, per_token_loss=False, init=None):
  """(per-step metrics, final state as numpy) of training on `batches`, from `init` (a numpy
  state, put on this mesh; saves compiling the initialiser) or from the mesh's own init."""
  mesh = sharding.make_mesh(config.mesh, jax.devices() if devices is None else devices)
  setup = assembly.Assembly.of(config).setup(VOCAB, mesh)
  step = assembly.Assembly.of(config).train_step(setup, per_token_loss=per_token_loss)
  state = setup.init_fn() if init is None else jax.device_put(init, setup.state_shardings)
  metrics = []
  for b in batches:
    state, m = step(state, sharding.to_device(b, mesh))
    metrics.append(jax.tree.map(np.asarray, m))
  return metrics, jax.tree.map(np.asarray, state)


def init_state(config, devices=None):
  """The initial state as numpy, and the shardings it had on its mesh."""
  mesh = sharding.make_mesh(config.mesh, jax.devices() if devices is None else devices)
  setup = assembly.Assembly.of(config).setup(VOCAB, mesh)
  state = setup.init_fn()
  return jax.tree.map(np.asarray, state), jax.tree.map(lambda x: x.sharding, state)


def losses_of(metrics):
  return [float(m["mlm_loss_sum"] / m["mlm_count"]) for m in metrics]


def collectives_in(hlo_text):
  """{op: [operand shapes]} of the collectives in compiled HLO (tuple ops list every operand)."""
  found = collections.defaultdict(list)
  for line in hlo_text.splitlines():
    m = re.match(r"\s*(?:ROOT )?%\S+ = (\(.*?\)|\S+) (all-reduce|all-gather|reduce-scatter|"
                 r"all-to-all|collective-permute)(?:-start)?\(", line)
    if m:
      shapes = re.findall(r"[a-z]+\d*\[([\d,]*)\]", m.group(1))
      found[m.group(2)].append([tuple(int(d) for d in s.split(",") if d) for s in shapes])
  return found
