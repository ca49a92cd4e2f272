"""The `config.tokenizer` keys, typed and checked: the tokenizer a run trains or loads (the keys'
meanings are in configs/base.py)."""

from __future__ import annotations

import dataclasses

from mlmjax import typed_settings


@dataclasses.dataclass(frozen=True)
class TokenizerSettings(typed_settings.Section):
  """config.tokenizer, typed."""

  KEY = "tokenizer"

  path: str
  vocab_size: int
  model_type: str
  max_training_sentences: int

  def __post_init__(self):
    typed_settings.one_of("tokenizer.model_type", self.model_type, ("unigram", "bpe"))
