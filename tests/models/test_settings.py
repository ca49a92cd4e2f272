"""The model's typed settings (models/settings.py): made once from config.model, every rule of
its keys checked there in one line naming the key, frozen, and the only thing models take."""

import dataclasses

import pytest

from mlmjax.configs import base
from mlmjax.errors import ConfigError
from mlmjax.models import electra
from mlmjax.models.settings import ModelSettings


def _settings(**changes) -> ModelSettings:
  model = base.get_config().model
  model.update(changes)
  return ModelSettings.from_config(model)


def test_the_config_reads_into_typed_frozen_settings():
  s = _settings(rope_base=160_000, hidden_size=64, num_heads=4)
  assert {f.name for f in dataclasses.fields(s)} == set(base.get_config().model.keys())
  assert isinstance(s.rope_base, float) and s.head_size == 16
  with pytest.raises(dataclasses.FrozenInstanceError):
    s.hidden_size = 8  # pylint: disable=attribute-defined-outside-init


@pytest.mark.parametrize("changes,message", [
    ({"hidden_size": 100}, "model.hidden_size=100 must be a positive multiple of"
                           " model.num_heads=12"),
    ({"position_embedding_type": "rope", "hidden_size": 36},
     "model.position_embedding_type='rope' needs an even head size; model.hidden_size /"
     " model.num_heads = 3"),
    ({"num_layers": 0}, "model.num_layers=0 must be >= 1"),
    ({"dropout_rate": 1.0}, "model.dropout_rate=1.0 must be in [0, 1)"),
    ({"dtype": "float16"}, "model.dtype='float16' is not one of auto, float32, bfloat16"),
    ({"remat": "some"}, "model.remat='some' is not one of none, dots_saveable, full"),
    ({"mlp": "relu"}, "model.mlp='relu' is not one of gelu, geglu, swiglu"),
    ({"local_attention_window": -1}, "model.local_attention_window must be >= 0 and"
                                     " model.global_attention_every >= 1"),
    ({"rope_base": 0.0}, "model.rope_base and model.local_rope_base must be positive"),
    ({"attention_impl": "flash"}, "model.attention_impl='flash' is not one of auto, xla,"
                                  " cudnn, splash, pallas_gpu"),
])
def test_each_rule_is_one_line_naming_the_key(changes, message):
  with pytest.raises(ConfigError) as e:
    _settings(**changes)
  assert str(e.value) == message


def test_a_changed_copy_is_checked_too():
  with pytest.raises(ConfigError, match="model.num_heads=7"):
    dataclasses.replace(_settings(), num_heads=7)
  assert dataclasses.replace(_settings(), rope_base=5.0).rope_base == 5.0
  # ELECTRA's generator is a changed copy: its width must still split into its heads.
  assert electra.generator_settings(_settings(), 1 / 3).hidden_size == 256
  with pytest.raises(ConfigError) as e:
    electra.generator_settings(_settings(), 0.3)
  assert str(e.value) == ("objective.generator_fraction=0.3 must be in (0, 1] and give a"
                          " generator width (230) divisible by its heads (4)")
