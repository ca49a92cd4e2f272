"""The `config.model` keys as the models read them: one frozen, typed settings object, made
once from the config (`ModelSettings.from_config`) with every rule of its own keys checked
there; the models take it and nothing else of the config. The keys' meanings are in
configs/base.py.

Rules that need more than the model's keys stay where that is known: what the attention kernel
can do on the platform compiled for (training/config_check.py), and the ELECTRA generator's
width (the objective's `generator_fraction`, electra.py).
"""

from __future__ import annotations

import dataclasses

from mlmjax import typed_settings
from mlmjax.errors import ConfigError
from mlmjax.models import attention

REMAT = ("none", "dots_saveable", "full")
DTYPES = ("auto", "float32", "bfloat16")
POSITIONS = ("learned", "rope")
NORM_POSITIONS = ("post", "pre")
LAYER_NORM_BACKWARDS = ("auto", "fused", "autodiff")
MLPS = ("gelu", "geglu", "swiglu")


@dataclasses.dataclass(frozen=True)
class ModelSettings(typed_settings.Section):
  """config.model, typed (field names are the config's keys)."""

  KEY = "model"

  hidden_size: int
  num_layers: int
  num_heads: int
  intermediate_size: int
  embedding_size: int  # ELECTRA's shared embedding width; 0: hidden_size
  max_position_embeddings: int
  type_vocab_size: int
  dropout_rate: float
  attention_dropout_rate: float
  initializer_range: float
  layer_norm_eps: float
  layer_norm_backward: str
  position_embedding_type: str
  norm_position: str
  mlp: str
  use_bias: bool
  local_attention_window: int
  global_attention_every: int
  rope_base: float
  local_rope_base: float
  dtype: str
  attention_impl: str
  remat: str
  scan_layers: bool

  def __post_init__(self):
    typed_settings.one_of("model.position_embedding_type", self.position_embedding_type, POSITIONS)
    if self.hidden_size < 1 or self.num_heads < 1 or self.hidden_size % self.num_heads:
      raise ConfigError(f"model.hidden_size={self.hidden_size} must be a positive multiple of"
                        f" model.num_heads={self.num_heads}")
    if self.position_embedding_type == "rope" and self.head_size % 2:
      raise ConfigError(f"model.position_embedding_type='rope' needs an even head size;"
                        f" model.hidden_size / model.num_heads = {self.head_size}")
    for key in ("num_layers", "intermediate_size", "max_position_embeddings",
                "type_vocab_size"):
      if getattr(self, key) < 1:
        raise ConfigError(f"model.{key}={getattr(self, key)} must be >= 1")
    for key in ("dropout_rate", "attention_dropout_rate"):
      if not 0.0 <= getattr(self, key) < 1.0:
        raise ConfigError(f"model.{key}={getattr(self, key)} must be in [0, 1)")
    typed_settings.one_of("model.dtype", self.dtype, DTYPES)
    typed_settings.one_of("model.remat", self.remat, REMAT)
    typed_settings.one_of("model.norm_position", self.norm_position, NORM_POSITIONS)
    typed_settings.one_of("model.layer_norm_backward", self.layer_norm_backward,
                          LAYER_NORM_BACKWARDS)
    typed_settings.one_of("model.mlp", self.mlp, MLPS)
    if self.local_attention_window < 0 or self.global_attention_every < 1:
      raise ConfigError("model.local_attention_window must be >= 0 and"
                        " model.global_attention_every >= 1")
    if self.rope_base <= 0 or self.local_rope_base <= 0:
      raise ConfigError("model.rope_base and model.local_rope_base must be positive")
    typed_settings.one_of("model.attention_impl", self.attention_impl, attention.IMPLEMENTATIONS)

  @property
  def head_size(self) -> int:
    return self.hidden_size // self.num_heads
