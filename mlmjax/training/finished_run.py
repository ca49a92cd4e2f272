"""A finished (or paused) run loaded back from its folder: settings, tokenizer and one
checkpoint's state, for prediction, evaluation, export and fine-tuning."""

from __future__ import annotations

import dataclasses
import functools

from absl import logging
import jax
from flax import nnx
import numpy as np

from mlmjax.data.text import tokenizer as tokenizer_lib
from mlmjax import errors
from mlmjax.models import bert
from mlmjax.models import special_ids
from mlmjax.parallel import sharding
from mlmjax.training import assembly
from mlmjax.training import config_check
from mlmjax.training.core import train_state
from mlmjax.training import objectives
from mlmjax.training.planning import phases as phases_lib
from mlmjax.training.run import checkpoint as checkpoint_lib
from mlmjax.training.run import workdir as workdir_lib
from mlmjax.training.run_settings import RunSettings

MASK_TEXT = "[MASK]"  # in a text given to predict or generate: one token to fill


@dataclasses.dataclass
class FinishedRun:
  """A run's settings, tokenizer and the state of one checkpoint, on one device."""

  settings: RunSettings  # as saved, with the rotary base of the checkpoint's phase
  tokenizer: tokenizer_lib.Tokenizer  # or hf_tokenizer.HFTokenizer: the same methods
  step: int
  state: train_state.State  # {"step", "params", "opt_state"}
  setup: train_state.MeshSetup  # the mesh, shardings and graph it was restored onto
  plan: phases_lib.Plan  # its phases (train.phases parsed)

  @property
  def parts(self) -> assembly.Assembly:
    """Its parts (training/assembly.py): the held-out step, the objectives."""
    return assembly.Assembly(self.settings, self.plan)

  @property
  def hf_model_type(self) -> str | None:
    """The transformers model type its objective exports as (hf/convert.py export_arch)."""
    return self.parts.objective().hf_model_type

  @property
  def graphdef(self) -> nnx.GraphDef:
    return self.setup.graphdef

  def model(self):
    """The NNX model holding the checkpoint's parameters."""
    return nnx.merge(self.graphdef, self.state["params"])

  @functools.cached_property
  def _apply(self):
    graphdef = self.graphdef
    return jax.jit(lambda params, batch: nnx.merge(graphdef, params)(batch))

  def forward(self, batch: dict) -> dict:
    """The model's outputs on a host batch, compiled once per batch shape (op-by-op dispatch
    of the NNX module is several times slower, even for one text)."""
    return self._apply(self.state["params"], batch)

  def encode_masked(self, text: str) -> list[int]:
    """Text with literal [MASK]s -> [CLS] ids [SEP], each [MASK] one MASK_ID."""
    parts = text.split(MASK_TEXT)
    ids = [special_ids.CLS_ID]
    for i, part in enumerate(parts):
      if part.strip():
        ids += self.tokenizer.encode([part.strip()])[0]
      if i < len(parts) - 1:
        ids.append(special_ids.MASK_ID)
    return ids + [special_ids.SEP_ID]

  def mlm_logits(self, ids: np.ndarray) -> np.ndarray:
    """[B, L] ids, each row one text followed by [PAD]s -> the MLM head's logits at every
    position [B, L, V]."""
    return np.asarray(self.forward(_batch(ids))["mlm_logits"])

  @functools.cached_property
  def _causal_log_probs(self):
    graphdef = self.graphdef

    def log_probs(params, batch):  # a fresh model each trace: causal is set on it alone
      out = nnx.merge(graphdef, params).next_token_features(batch)
      logits = bert.decode(out["clm_features"], out["decoder"], out["decoder_bias"])
      return jax.nn.log_softmax(logits, axis=-1)
    return jax.jit(log_probs)

  def check_causal(self) -> None:
    """A one-line error unless the checkpoint's phase trained the causal-LM objective."""
    objective = self.plan.at(max(self.step - 1, 0)).objective
    if not objectives.get(objective).scores_text:
      raise errors.UserError(f"the run's checkpoint of step {self.step} was trained on"
                             f" {objective}; scoring text needs a causal-LM run"
                             " (--config.objective.kind=clm)")

  def causal_log_probs(self, ids: np.ndarray) -> np.ndarray:
    """[B, L] ids, each row one text followed by [PAD]s -> [B, L, V]: at each position, the
    log-probabilities of its token given the tokens before it, the model attending causally
    (position 0's are zeros: nothing precedes it). A causal-LM run's (objective.kind='clm'):
    it scores text (models/sample_quality.py), and unmasking one position at a time left to
    right (inference/unmasking.py, block_length=1) samples from it."""
    self.check_causal()
    log_probs = np.asarray(self._causal_log_probs(self.state["params"], _batch(ids)))
    return np.concatenate([np.zeros_like(log_probs[:, :1]), log_probs], axis=1)

  def next_token_log_probs(self, ids: np.ndarray) -> np.ndarray:
    """[B, L-1]: the log-probability causal_log_probs gives each token of ids[:, 1:]."""
    return np.take_along_axis(self.causal_log_probs(ids)[:, 1:], ids[:, 1:, None],
                              axis=-1)[..., 0]


def _batch(ids: np.ndarray) -> dict[str, np.ndarray]:
  """The model's batch of [B, L] ids, each row one text followed by [PAD]s; every position
  predicted."""
  every = np.broadcast_to(np.arange(ids.shape[1], dtype=np.int32), ids.shape)
  return {"input_ids": ids.astype(np.int32),
          "segment_ids": (ids != special_ids.PAD_ID).astype(np.int32), "positions": every,
          "token_type_ids": np.zeros(ids.shape, np.int32), "masked_positions": every}


def load(path: str, step: int | None = None, mesh: jax.sharding.Mesh | str | None = None
         ) -> FinishedRun:
  """Checkpoint `step` (default: the latest) of the run in `path`, rebuilt from the run's own
  config.json and tokenizer, whatever mesh trained it: on `mesh` (sharded by the run's
  mesh.rules); mesh='run': the run's own mesh shape if this machine's devices can hold it;
  otherwise on the first device."""
  run = workdir_lib.Workdir(path)
  parts = run.load_run()
  settings = parts.settings
  tok = tokenizer_lib.load(run.saved_tokenizer())
  if mesh == "run":
    try:
      config_check.check_mesh(settings.mesh, settings.train, settings.data, parts.plan)
      mesh = sharding.make_mesh(settings.mesh)
    except errors.ConfigError as e:
      logging.info("%s: loading onto one device", e)
      mesh = None
  if mesh is None:
    settings = settings.replace(mesh={"shape": (1, 1, 1)})
    mesh = sharding.make_mesh(settings.mesh, devices=jax.devices()[:1])
  ckpt = checkpoint_lib.Checkpointer(run.checkpoints, run.corrupt_checkpoints,
                                     settings.train.max_checkpoints_to_keep)
  try:
    step = ckpt.latest_step() if step is None else step
    if step is None:
      raise errors.UserError(f"{path} has no checkpoint yet")
    if step not in ckpt.all_steps():
      raise errors.UserError(f"{path} has no checkpoint of step {step} (it has"
                             f" {', '.join(map(str, ckpt.all_steps()))})")
    # The rotary base the checkpoint was trained at (a context-extension phase raises it):
    # predict, evaluate and export then run the model as it was trained.
    settings = settings.replace(model={"rope_base": parts.plan.at(step - 1).rope_base})
    parts = parts.with_settings(settings)
    setup = parts.setup(tok.vocab_size, mesh)
    state = ckpt.restore(step, setup.abstract_state).state
  finally:
    ckpt.close()
  return FinishedRun(settings, tok, step, state, setup, parts.plan)
