"""The `config.data` keys, typed and checked (`from_config`): what the input reads of the
config (the tokenizer's keys are text/settings.py's). The keys' meanings are in configs/base.py.

Rules across sections stay in mlmjax/training/config_check.py: a row length the model and the
format can hold, one group of mixture weights per phase, shards that divide the batch.
"""

from __future__ import annotations

import dataclasses

from mlmjax import typed_settings
from mlmjax.data.rows import formats
from mlmjax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class InputSettings(typed_settings.Section):
  """config.data, typed (field names are the config's keys)."""

  KEY = "data"

  source: str
  sources: str
  sources_phase_weights: str
  text_field: str
  eval_every_nth_document: int
  max_document_chars: int
  num_shards: int
  seq_len: int
  format: str
  row_shuffle_window: int
  worker_count: int
  device_prefetch: int

  def __post_init__(self):
    typed_settings.one_of("data.format", self.format, formats.FORMATS)
    if self.eval_every_nth_document < 2:
      raise ConfigError(f"data.eval_every_nth_document={self.eval_every_nth_document} must be"
                        " >= 2")
    if self.max_document_chars < 1 or self.row_shuffle_window < 0:
      raise ConfigError("data.max_document_chars must be >= 1 and data.row_shuffle_window >= 0")
    if self.sources and self.source != "builtin":
      raise ConfigError(f"data.sources={self.sources!r} replaces data.source={self.source!r}:"
                        " set one of them")
    if self.sources_phase_weights and not self.sources:
      raise ConfigError("data.sources_phase_weights needs data.sources (the weighted sources)")
    if not self.text_field:
      raise ConfigError("data.text_field must name the field (.jsonl) or column (parquet,"
                        " datasets) that holds the text, e.g. 'text'")
    if self.worker_count < 0 or self.device_prefetch < 0:
      raise ConfigError(f"data.worker_count={self.worker_count} and data.device_prefetch="
                        f"{self.device_prefetch} must be >= 0")
