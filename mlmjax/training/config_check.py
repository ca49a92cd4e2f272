"""The rules across a run's config sections and its devices, checked at once before a run
writes anything to its workdir.

Each section's own rules are checked where its settings are made (run_settings.py lists the
classes); `checked(config)` makes them, plans the phases once (phases.py) and then runs
`check`. Each rule takes the plan and the sections it checks. Every rule raises
errors.ConfigError with a message naming the key(s) to change. Rules that need the data (a
corpus too small, a tokenizer that does not match a checkpoint) are checked where the data is
read.
"""

from __future__ import annotations

import jax
import numpy as np

from mlmjax.data.corpora import mixture
from mlmjax.data import masking
from mlmjax.data.rows import formats
from mlmjax.data.settings import InputSettings
from mlmjax.errors import ConfigError
from mlmjax.hf import importer
from mlmjax.models import attention
from mlmjax.models import bert as model_lib
from mlmjax.models.settings import ModelSettings
from mlmjax.parallel.settings import MeshSettings
from mlmjax.parallel import sharding
from mlmjax import paths
from mlmjax.training import assembly
from mlmjax.training import objectives
from mlmjax.training.planning import phases as phases_lib
from mlmjax.training.run_settings import RunSettings
from mlmjax.training.settings import TrainSettings


def checked(config, num_devices: int | None = None, num_processes: int | None = None,
            platform: str | None = None) -> assembly.Assembly:
  """`config` (a ConfigDict, or settings already made) as a run's assembly (its settings and
  plan), every rule checked."""
  parts = assembly.Assembly.of(config)
  check(parts.settings, parts.plan, num_devices, num_processes, platform)
  return parts


def check(settings: RunSettings, plan: phases_lib.Plan, num_devices: int | None = None,
          num_processes: int | None = None, platform: str | None = None) -> None:
  """All rules across sections (`plan`: the run's phases); `num_devices`/`num_processes`/
  `platform` default to this run's (jax's); a compile for another target (training/planning/aot.py)
  passes the target's."""
  num_devices = jax.device_count() if num_devices is None else num_devices
  num_processes = jax.process_count() if num_processes is None else num_processes
  importer.init_from_folder(settings.init_from)
  check_saved(settings, plan, platform)
  check_mesh(settings.mesh, settings.train, settings.data, plan, num_devices, num_processes)
  if settings.masking.entity_gazetteer and "entity" in settings.masking.in_use():
    _check_gazetteer(settings.masking.entity_gazetteer)


def check_saved(settings: RunSettings, plan: phases_lib.Plan, platform: str | None = None
                ) -> None:
  """The rules a saved run's settings must still meet for its checkpoint to load (the model,
  its objective, the phases; saved_config.py): not those of this machine's devices, nor of
  files only training reads (a corpus, a gazetteer, an init_from folder)."""
  _check_attention(settings.model, plan, platform)
  _check_mixture_phases(settings.data, plan)
  _check_phases(plan, settings.model, settings.data, settings.masking)
  _check_objective(settings, plan)


def _check_objective(settings: RunSettings, plan: phases_lib.Plan) -> None:
  m = settings.masking
  if any(p.masker == objectives.DIFFUSION_MASKER for p in plan.phases) and (
      m.strategy != "random"):
    raise ConfigError(f"the diffusion objective masks each token alone at its document's rate:"
                      f" it takes masking.strategy='random', not {m.strategy!r}")
  objectives.get(settings.objective.kind).check(
      settings, formats.has_pair_labels(settings.data.format),
      tuple(p.objective for p in plan.phases))


def _check_attention(model: ModelSettings, plan: phases_lib.Plan,
                     platform: str | None = None) -> None:
  """What the attention kernel can do on the platform compiled for, at the longest phase."""
  why = attention.check(model.attention_impl, model_lib.compute_dtype(model.dtype, platform),
                        max(p.seq_len for p in plan.phases), platform,
                        window=model.local_attention_window)
  if why:
    raise ConfigError(f"model.attention_impl={model.attention_impl!r} {why}")
  if model.attention_impl not in ("auto", "xla") and model.attention_dropout_rate > 0:
    raise ConfigError(f"model.attention_impl={model.attention_impl!r} never forms the attention"
                      " probabilities, so it cannot apply model.attention_dropout_rate="
                      f"{model.attention_dropout_rate}: set it to 0, or use 'auto'")


def _check_mixture_phases(data: InputSettings, plan: phases_lib.Plan) -> None:
  """One group of data.sources_phase_weights per phase, each parsing (mixture.py)."""
  if not data.sources:
    return
  num_phases = len(plan.phases)
  for phase in range(num_phases):
    mixture.phase_weights(data, phase)
  groups = [g for g in data.sources_phase_weights.split(";") if g.strip()]
  if groups and len(groups) != num_phases:
    raise ConfigError(f"data.sources_phase_weights has {len(groups)} groups for {num_phases}"
                      " phases (train.phases): give one per phase")


def _check_gazetteer(path: str) -> None:
  if not paths.isfile(path):
    raise ConfigError(f"masking.entity_gazetteer: {path!r} does not exist")
  with paths.open(path, "rb") as f:
    if not any(line.strip() for line in f):
      raise ConfigError(f"masking.entity_gazetteer: {path!r} has no phrases (one per line)")


def _check_phases(plan: phases_lib.Plan, model: ModelSettings, data: InputSettings,
                  m: masking.Settings) -> None:
  """Each phase's rows fit the model and the format, and hold the predictions its highest
  mask rate wants; static masks take no rate schedule."""
  if plan.mask_rates is not None and "static" in m.in_use():
    raise ConfigError("masking.strategy 'static' masks are fixed: they take no mask rate"
                      " schedule (set masking.mask_rate_schedule='constant', no phase rates)")
  min_len = 5 if formats.has_pair_labels(data.format) else 3
  limit = model.max_position_embeddings
  for phase in plan.phases:
    if phase.seq_len > limit:
      raise ConfigError(f"data.seq_len={phase.seq_len} exceeds"
                        f" model.max_position_embeddings={limit}")
    if phase.seq_len < min_len:
      raise ConfigError(f"data.seq_len={phase.seq_len} must be >= {min_len} for"
                        f" data.format={data.format!r}")
    # A full row holds seq_len - 2 maskable tokens; the masker's own budget formula says how
    # many predictions it wants at the phase's highest rate.
    rate = round(plan.peak_rate(phase, m.mask_rate), 6)
    _, wanted = masking.budget(phase.seq_len - 2, rate, phase.max_predictions)
    what = (f"the phase's highest mask rate {rate}" if plan.mask_rates is not None
            else f"masking.mask_rate={rate}")
    if phase.max_predictions < wanted:
      raise ConfigError(
          f"masking.max_predictions_per_seq={phase.max_predictions} is too small for {what} at"
          f" seq_len {phase.seq_len}: a full row wants {int(wanted)} predictions; set it to at"
          f" least {int(wanted)}")


def check_mesh(mesh: MeshSettings, train: TrainSettings, data: InputSettings,
               plan: phases_lib.Plan, num_devices: int | None = None,
               num_processes: int | None = None) -> None:
  """The mesh and batch rules, against `num_devices` and `num_processes` (default: this
  machine's; a finished run loaded somewhere other than where it trained)."""
  _check_mesh_and_batch(mesh.shape, plan.batch_sizes(), train.grad_accum_steps,
                        data.num_shards,
                        jax.device_count() if num_devices is None else num_devices,
                        jax.process_count() if num_processes is None else num_processes)


def _check_mesh_and_batch(shape: tuple, batch_sizes: list[int], grad_accum_steps: int,
                          num_shards: int, num_devices: int, num_processes: int) -> None:
  """The mesh fits the devices; every batch size of the run splits over the data-parallel
  devices x micro-batches, the processes and the data shards."""
  known = int(np.prod([s for s in shape if s != -1]))
  if -1 in shape and num_devices % known:
    raise ConfigError(f"config.mesh.shape={shape}: {num_devices} devices are not divisible by"
                      f" {known}")
  if -1 not in shape and known != num_devices:
    raise ConfigError(f"config.mesh.shape={shape} needs {known} devices, have {num_devices}")
  resolved = dict(zip(sharding.MESH_AXES, sharding.resolve_mesh_shape(shape, num_devices)))
  dp = int(np.prod([resolved[a] for a in sharding.BATCH_AXES]))
  shards = num_shards or num_processes
  for size in batch_sizes:
    if size % (dp * grad_accum_steps) or size % num_processes:
      raise ConfigError(
          f"train.batch_size={size} must be divisible by train.grad_accum_steps="
          f"{grad_accum_steps} x the data-parallel size {dp} (data x fsdp of the mesh"
          f" {resolved}) and by the process count {num_processes}")
    if num_shards < 0 or shards % num_processes or size % shards:
      raise ConfigError(f"data.num_shards={shards} must be a multiple of the {num_processes}"
                        f" processes and divide train.batch_size={size}")


def check_batch_on_mesh(shape: tuple, batch_size: int, num_devices: int | None = None,
                        num_processes: int | None = None) -> None:
  """Fine-tuning's batch rule: no accumulation, one data shard per process."""
  _check_mesh_and_batch(shape, [batch_size], 1, 0,
                        jax.device_count() if num_devices is None else num_devices,
                        jax.process_count() if num_processes is None else num_processes)
