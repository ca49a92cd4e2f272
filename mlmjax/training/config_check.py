"""Every config rule, checked at once before a run writes anything to its workdir.

`check(config)` raises errors.ConfigError with a message naming the key(s) to change. Rules that
need the data (a corpus too small, a tokenizer that does not match a checkpoint) are checked
where the data is read; everything that the config alone (and the devices) decides is here.
"""

from __future__ import annotations

import jax
import ml_collections
import numpy as np

from mlmjax import paths
from mlmjax.data import formats
from mlmjax.data import masking
from mlmjax.data import mixture
from mlmjax.data.masking import rate_schedule
from mlmjax.data.masking import settings as masking_settings
from mlmjax.errors import ConfigError
from mlmjax.hf import importer
from mlmjax.models import attention
from mlmjax.models import bert as model_lib
from mlmjax.models import electra
from mlmjax.models.settings import ModelSettings
from mlmjax.parallel import sharding
from mlmjax.training import optimizer
from mlmjax.training import phases as phases_lib
from mlmjax.training import profiling


def _one_of(key: str, value, allowed) -> None:
  if value not in allowed:
    raise ConfigError(f"{key}={value!r} is not one of {', '.join(allowed)}")


def _check_rate(key: str, rate: float) -> None:
  if not 0.0 < rate < 1.0:
    raise ConfigError(f"{key}={rate} must be strictly between 0 and 1")


def check(config, num_devices: int | None = None, num_processes: int | None = None,
          platform: str | None = None) -> None:
  """All rules; `num_devices`/`num_processes`/`platform` default to this run's (jax's); a
  compile for another target (training/aot.py) passes the target's."""
  num_devices = jax.device_count() if num_devices is None else num_devices
  num_processes = jax.process_count() if num_processes is None else num_processes
  importer.init_from_folder(config.init_from)
  _check_model(config, platform)
  _check_data(config)
  _check_masking(config.masking)
  _check_phases(config)
  _check_mesh_and_batch(config, num_devices, num_processes)
  _check_train(config.train)
  _check_rate("eval.mask_rate", config.eval.mask_rate)
  _check_objective(config)


def check_saved(config) -> None:
  """The rules a saved run's config must still meet for its checkpoint to load (the model, its
  objective and optimizer, the phases; saved_config.py): not those of this machine's devices,
  nor of files only training reads (a corpus, a gazetteer, an init_from folder)."""
  _check_model(config)
  _check_data(config)
  _check_phases(config)
  _check_train(config.train)
  _check_rate("eval.mask_rate", config.eval.mask_rate)
  _check_objective(config)


def _check_objective(config) -> None:
  o = config.objective
  _one_of("objective.kind", o.kind, ("mlm", "electra"))
  if o.span_boundary_weight < 0:
    raise ConfigError("objective.span_boundary_weight must be >= 0")
  if o.kind == "electra":
    if formats.has_pair_labels(config.data.format) or o.span_boundary_weight:
      raise ConfigError(f"objective.kind='electra' trains no NSP/SOP or span-boundary head: use"
                        f" a single-sequence data.format (not {config.data.format!r}) and"
                        " objective.span_boundary_weight=0")
    electra.generator_settings(ModelSettings.from_config(config.model), o.generator_fraction)
    if o.discriminator_weight <= 0:
      raise ConfigError("objective.discriminator_weight must be > 0")
  elif config.model.embedding_size not in (0, config.model.hidden_size):
    raise ConfigError("model.embedding_size (a width shared by ELECTRA's two encoders) needs"
                      " objective.kind='electra'")


def _check_model(config, platform: str | None = None) -> None:
  """The model's own rules (models/settings.py), then what its attention kernel can do on the
  platform compiled for, at the longest phase."""
  m = ModelSettings.from_config(config.model)
  why = attention.check(m.attention_impl, model_lib.compute_dtype(m.dtype, platform),
                        max(p.seq_len for p in phases_lib.plan(config)), platform,
                        window=m.local_attention_window)
  if why:
    raise ConfigError(f"model.attention_impl={m.attention_impl!r} {why}")
  if m.attention_impl not in ("auto", "xla") and m.attention_dropout_rate > 0:
    raise ConfigError(f"model.attention_impl={m.attention_impl!r} never forms the attention"
                      " probabilities, so it cannot apply model.attention_dropout_rate="
                      f"{m.attention_dropout_rate}: set it to 0, or use 'auto'")


def _check_data(config) -> None:
  d = config.data
  _one_of("data.format", d.format, formats.FORMATS)
  if d.eval_every_nth_document < 2:
    raise ConfigError(f"data.eval_every_nth_document={d.eval_every_nth_document} must be >= 2")
  if d.max_document_chars < 1 or d.row_shuffle_window < 0:
    raise ConfigError("data.max_document_chars must be >= 1 and data.row_shuffle_window >= 0")
  if d.sources:
    if d.source != "builtin":
      raise ConfigError(f"data.sources={d.sources!r} replaces data.source={d.source!r}: set one"
                        " of them")
    num_phases = len(phases_lib.plan(config))
    for phase in range(num_phases):  # each phase's weights parse (mixture.py)
      mixture.phase_weights(d, phase)
    groups = [g for g in d.sources_phase_weights.split(";") if g.strip()]
    if groups and len(groups) != num_phases:
      raise ConfigError(f"data.sources_phase_weights has {len(groups)} groups for {num_phases}"
                        " phases (train.phases): give one per phase")
  elif d.sources_phase_weights:
    raise ConfigError("data.sources_phase_weights needs data.sources (the weighted sources)")
  if not d.text_field:
    raise ConfigError("data.text_field must name the field (.jsonl) or column (parquet,"
                      " datasets) that holds the text, e.g. 'text'")
  if d.worker_count < 0 or d.device_prefetch < 0:
    raise ConfigError(f"data.worker_count={d.worker_count} and data.device_prefetch="
                      f"{d.device_prefetch} must be >= 0")
  _one_of("tokenizer.model_type", config.tokenizer.model_type, ("unigram", "bpe"))


def _check_masking(c) -> None:
  """The masking.* keys; the mixture spec's syntax is checked as it is parsed."""
  names = masking.STRATEGIES
  _one_of("masking.strategy", c.strategy, names)
  _check_rate("masking.mask_rate", c.mask_rate)
  if c.mask_token_prob < 0 or c.random_token_prob < 0 or (
      c.mask_token_prob + c.random_token_prob > 1.0):
    raise ConfigError("masking.mask_token_prob and masking.random_token_prob must be >= 0 and"
                      f" sum to <= 1, got {c.mask_token_prob} + {c.random_token_prob}")
  if c.max_predictions_per_seq < 1:
    raise ConfigError(f"masking.max_predictions_per_seq={c.max_predictions_per_seq} must be"
                      " >= 1")
  _one_of("masking.replacement", c.replacement, ("uniform", "unigram"))
  if c.adaptive_every_steps < 1:
    raise ConfigError(f"masking.adaptive_every_steps={c.adaptive_every_steps} must be >= 1")
  if not 0.0 <= c.adaptive_decay < 1.0:
    raise ConfigError(f"masking.adaptive_decay={c.adaptive_decay} must be in [0, 1)")
  if c.stats_max_documents < 0:
    raise ConfigError(f"masking.stats_max_documents={c.stats_max_documents} must be >= 0")
  settings = masking_settings.Settings.from_config(c)
  for name, _ in settings.mixture:
    if name not in names or name == "mixture":
      raise ConfigError(f"masking.mixture: {name!r} is not one of"
                        f" {', '.join(n for n in names if n != 'mixture')}")
  used = settings.in_use()
  if "static" in used:
    if c.dupe_factor < 1:
      raise ConfigError(f"masking.dupe_factor={c.dupe_factor} must be >= 1")
    _one_of("masking.static_strategy", c.static_strategy, masking.STATIC_BASES)
  if "span" in used:
    if not 0.0 < c.span_p <= 1.0:
      raise ConfigError(f"masking.span_p={c.span_p} must be in (0, 1] (SpanBERT: 0.2)")
    if c.span_max_words < 1:
      raise ConfigError(f"masking.span_max_words={c.span_max_words} must be >= 1 (SpanBERT: 10)")
  if "frequency" in used and not (np.isfinite(c.frequency_alpha) and c.frequency_alpha >= 0):
    raise ConfigError(f"masking.frequency_alpha={c.frequency_alpha} must be >= 0 (0: uniform,"
                      " 1: inverse frequency)")
  for needs_counts, what in (("frequency" in used, "strategy 'frequency'"),
                             (c.replacement == "unigram", "replacement='unigram'")):
    if needs_counts and c.stats_max_documents == 0:
      raise ConfigError(f"masking.{what} needs token counts: set masking.stats_max_documents"
                        " > 0")
  if "entity" in used:
    if not c.entity_heuristic and not c.entity_gazetteer:
      raise ConfigError("masking.strategy 'entity' needs masking.entity_heuristic=True or a"
                        " masking.entity_gazetteer file (one phrase per line)")
    if c.entity_gazetteer:
      _check_gazetteer(c.entity_gazetteer)


def _check_gazetteer(path: str) -> None:
  if not paths.isfile(path):
    raise ConfigError(f"masking.entity_gazetteer: {path!r} does not exist")
  with paths.open(path, "rb") as f:
    if not any(line.strip() for line in f):
      raise ConfigError(f"masking.entity_gazetteer: {path!r} has no phrases (one per line)")


def _check_phase_options(spec) -> None:
  for entry in spec:
    opts = entry[3] if len(entry) > 3 else {}
    if not isinstance(opts, dict) or set(opts) - set(phases_lib.OPTIONS):
      raise ConfigError(f"train.phases entry {tuple(entry)}: its 4th item must be a dict of"
                        f" {', '.join(phases_lib.OPTIONS)}")
    if "mask_rate_end" in opts and "mask_rate" not in opts:
      raise ConfigError(f"train.phases entry {tuple(entry)}: mask_rate_end needs mask_rate")
    for key in ("mask_rate", "mask_rate_end"):
      if key in opts:
        _check_rate(f"train.phases {key}", opts[key])
    if opts.get("batch_size", 1) < 1 or opts.get("rope_base", 1) <= 0:
      raise ConfigError(f"train.phases entry {tuple(entry)}: batch_size must be >= 1 and"
                        " rope_base > 0")


def _check_mask_rate_schedule(config) -> None:
  m = config.masking
  _one_of("masking.mask_rate_schedule", m.mask_rate_schedule, rate_schedule.SHAPES)
  _check_rate("masking.mask_rate_end", m.mask_rate_end)
  if phases_lib.schedules_mask_rate(config) and "static" in masking.Settings.from_config(
      m).in_use():
    raise ConfigError("masking.strategy 'static' masks are fixed: they take no mask rate"
                      " schedule (set masking.mask_rate_schedule='constant', no phase rates)")


def _check_phases(config) -> None:
  spec = config.train.phases
  if spec and (any(len(p) not in (3, 4) for p in spec) or min(p[0] for p in spec) <= 0
               or abs(sum(p[0] for p in spec) - 1.0) > 1e-6):
    raise ConfigError(f"train.phases={spec} must be (fraction, seq_len, max_predictions"
                      "[, options]) entries with positive fractions summing to 1")
  _check_phase_options(spec)
  _check_mask_rate_schedule(config)
  rates = phases_lib.mask_rates(config)
  min_len = 5 if formats.has_pair_labels(config.data.format) else 3
  for phase in phases_lib.plan(config):
    if phase.seq_len > config.model.max_position_embeddings:
      raise ConfigError(f"data.seq_len={phase.seq_len} exceeds"
                        f" model.max_position_embeddings={config.model.max_position_embeddings}")
    if phase.seq_len < min_len:
      raise ConfigError(f"data.seq_len={phase.seq_len} must be >= {min_len} for"
                        f" data.format={config.data.format!r}")
    # A full row holds seq_len - 2 maskable tokens; the masker's own budget formula says how
    # many predictions it wants at the phase's highest rate.
    rate = round(rates.peak(phase.start, phase.end), 6)
    _, wanted = masking.budget(phase.seq_len - 2, rate, phase.max_predictions)
    what = (f"the phase's highest mask rate {rate}" if phases_lib.schedules_mask_rate(config)
            else f"masking.mask_rate={rate}")
    if phase.max_predictions < wanted:
      raise ConfigError(
          f"masking.max_predictions_per_seq={phase.max_predictions} is too small for {what} at"
          f" seq_len {phase.seq_len}: a full row wants {int(wanted)} predictions; set it to at"
          f" least {int(wanted)}")


def _check_mesh_and_batch(config, num_devices: int, num_processes: int) -> None:
  shape = tuple(config.mesh.shape)
  if len(shape) != len(sharding.MESH_AXES) or shape.count(-1) > 1 or any(
      s == 0 or s < -1 for s in shape):
    raise ConfigError(f"config.mesh.shape={shape} must have 3 positive entries"
                      f" {sharding.MESH_AXES}, at most one of them -1")
  known = int(np.prod([s for s in shape if s != -1]))
  if -1 in shape and num_devices % known:
    raise ConfigError(f"config.mesh.shape={shape}: {num_devices} devices are not divisible by"
                      f" {known}")
  if -1 not in shape and known != num_devices:
    raise ConfigError(f"config.mesh.shape={shape} needs {known} devices, have {num_devices}")
  for rule in config.mesh.rules:
    if len(rule) != 2:
      raise ConfigError(f"config.mesh.rules entry {rule!r} must be a (logical axis, mesh axis)"
                        " pair")
    for axis in sharding.rule_targets(rule[1]):
      if axis not in sharding.MESH_AXES:
        raise ConfigError(f"config.mesh.rules maps {rule[0]!r} to {axis!r}, which is not a"
                          f" mesh axis ({', '.join(sharding.MESH_AXES)})")
  resolved = dict(zip(sharding.MESH_AXES, sharding.resolve_mesh_shape(shape, num_devices)))
  dp = int(np.prod([resolved[a] for a in sharding.BATCH_AXES]))
  t = config.train
  if t.grad_accum_steps < 1:
    raise ConfigError(f"train.grad_accum_steps={t.grad_accum_steps} must be >= 1")
  shards = config.data.num_shards or num_processes
  for batch_size in phases_lib.batch_sizes(t):
    if batch_size < 1 or batch_size % (dp * t.grad_accum_steps) or batch_size % num_processes:
      raise ConfigError(
          f"train.batch_size={batch_size} must be divisible by train.grad_accum_steps="
          f"{t.grad_accum_steps} x the data-parallel size {dp} (data x fsdp of the mesh"
          f" {resolved}) and by the process count {num_processes}")
    if config.data.num_shards < 0 or shards % num_processes or batch_size % shards:
      raise ConfigError(f"data.num_shards={shards} must be a multiple of the {num_processes}"
                        f" processes and divide train.batch_size={batch_size}")


def _check_train(t) -> None:
  _one_of("train.optimizer", t.optimizer, optimizer.OPTIMIZERS)
  _one_of("train.schedule", t.schedule, optimizer.SCHEDULES)
  _one_of("train.decay_shape", t.decay_shape, optimizer.DECAY_SHAPES)
  _one_of("train.schedule_unit", t.schedule_unit, optimizer.SCHEDULE_UNITS)
  if not 0.0 <= t.muon_momentum < 1.0 or t.muon_rms <= 0:
    raise ConfigError("train.muon_momentum must be in [0, 1) and train.muon_rms > 0")
  if not 0.0 < t.decay_fraction <= 1.0 or t.update_clip_rms < 0:
    raise ConfigError("train.decay_fraction must be in (0, 1] and train.update_clip_rms >= 0")
  _check_nonfinite_policy(t)
  profiling.parse(t.profile_steps)
  if t.steps < 1 or t.log_every_steps < 1 or t.eval_every_steps < 1 or (
      t.checkpoint_every_steps < 1) or t.eval_batches < 1 or t.max_checkpoints_to_keep < 1:
    raise ConfigError("train.steps, train.eval_batches, train.max_checkpoints_to_keep and the"
                      " train.*_every_steps intervals must be >= 1")
  if t.learning_rate < 0 or t.warmup_steps < 0:
    raise ConfigError("train.learning_rate and train.warmup_steps must be >= 0")


def _check_nonfinite_policy(t) -> None:
  """Pretraining's and fine-tuning's (training/loop.py)."""
  _one_of("train.nonfinite_policy", t.nonfinite_policy, ("skip", "stop"))
  if t.max_consecutive_skips < 0:
    raise ConfigError("train.max_consecutive_skips must be >= 0")


def check_mesh(config) -> None:
  """The mesh and batch rules alone, against this machine's devices (a finished run loaded
  somewhere other than where it trained)."""
  _check_mesh_and_batch(config, jax.device_count(), jax.process_count())


def check_finetune(config, pretrained, num_devices: int | None = None,
                   num_processes: int | None = None) -> None:
  """The rules of a fine-tuning config (mlmjax/finetuning/config.py) on the run `pretrained`
  (that run's config: model size, mesh rules)."""
  d, t = config.data, config.train
  limit = pretrained.model.max_position_embeddings
  if not 5 <= d.seq_len <= limit:
    raise ConfigError(f"data.seq_len={d.seq_len} must be between 5 and the pretrained model's"
                      f" max_position_embeddings={limit}")
  if d.max_train_examples < 0:
    raise ConfigError(f"data.max_train_examples={d.max_train_examples} must be >= 0 (0: all)")
  for key in ("dropout_rate", "attention_dropout_rate"):
    if not 0.0 <= config.model[key] < 1.0:
      raise ConfigError(f"model.{key}={config.model[key]} must be in [0, 1)")
  _one_of("train.optimizer", t.optimizer, optimizer.FINETUNE_OPTIMIZERS)
  if not t.epochs > 0 or t.learning_rate < 0 or not 0.0 <= t.warmup_fraction < 1.0:
    raise ConfigError("train.epochs must be > 0, train.learning_rate >= 0 and"
                      " train.warmup_fraction in [0, 1)")
  if t.log_every_steps < 1 or t.checkpoint_every_steps < 1 or t.max_checkpoints_to_keep < 1:
    raise ConfigError("train.log_every_steps, train.checkpoint_every_steps and"
                      " train.max_checkpoints_to_keep must be >= 1")
  _check_nonfinite_policy(t)
  # The pretraining rule, on the keys fine-tuning has (no accumulation, one shard per process).
  view = ml_collections.ConfigDict({
      "mesh": {"shape": config.mesh.shape, "rules": pretrained.mesh.rules},
      "train": {"batch_size": t.batch_size, "grad_accum_steps": 1, "phases": ()},
      "data": {"num_shards": 0}})
  _check_mesh_and_batch(view, jax.device_count() if num_devices is None else num_devices,
                        jax.process_count() if num_processes is None else num_processes)
