"""Recipe presets carry the published hyperparameters."""

import pytest

from mlmjax.configs import bert, biphasic, modernbert, mosaicbert, roberta, spanbert, wwm
from mlmjax.training.planning import phases
from mlmjax.training.run_settings import RunSettings

BERT_SIZES = {"tiny": (2, 128, 2), "mini": (4, 256, 4), "small": (4, 512, 8),
              "medium": (8, 512, 8), "base": (12, 768, 12), "large": (24, 1024, 16)}


@pytest.mark.parametrize("size", BERT_SIZES)
def test_bert(size):
  c = bert.get_config(size)
  layers, hidden, heads = BERT_SIZES[size]
  assert (c.model.num_layers, c.model.hidden_size, c.model.num_heads) == (layers, hidden, heads)
  assert c.model.intermediate_size == 4 * hidden
  assert c.data.format == "segment_pair"  # segment pairs + NSP
  assert (c.masking.strategy, c.masking.mask_rate) == ("random", 0.15)
  assert (c.masking.mask_token_prob, c.masking.random_token_prob) == (0.8, 0.1)
  assert (c.optimizer.learning_rate, c.optimizer.warmup_steps) == (1e-4, 10_000)
  assert (c.train.batch_size, c.train.steps) == (256, 1_000_000)
  assert (c.optimizer.adam_b1, c.optimizer.adam_b2, c.optimizer.adam_eps) == (0.9, 0.999, 1e-6)
  assert c.optimizer.weight_decay == 0.01
  assert c.train.phases == ((0.9, 128, 20), (0.1, 512, 80))
  plan = phases.plan(RunSettings.from_config(c))
  assert [(p.start, p.end, p.seq_len, p.max_predictions) for p in plan] == [
      (0, 900_000, 128, 20), (900_000, 1_000_000, 512, 80)]
  assert c.model.max_position_embeddings == 512


@pytest.mark.parametrize("size,lr,warmup,layers", [("base", 6e-4, 24_000, 12),
                                                   ("large", 4e-4, 30_000, 24)])
def test_roberta(size, lr, warmup, layers):
  c = roberta.get_config(size)
  assert c.model.num_layers == layers
  assert c.data.format == "full_sentences" and c.data.seq_len == 512  # no NSP
  assert c.train.batch_size == 8192
  assert (c.optimizer.learning_rate, c.optimizer.warmup_steps) == (lr, warmup)
  assert (c.optimizer.adam_b1, c.optimizer.adam_b2, c.optimizer.adam_eps) == (0.9, 0.98, 1e-6)
  assert c.optimizer.weight_decay == 0.01
  assert c.train.steps == 500_000
  assert c.masking.max_predictions_per_seq >= round(0.15 * 510)


def test_spanbert_wwm_and_30_percent():
  s = spanbert.get_config()
  assert (s.masking.strategy, s.masking.span_p, s.masking.span_max_words) == ("span", 0.2, 10)
  assert s.data.format == "doc_sentences" and s.data.seq_len == 512  # no NSP
  w = wwm.get_config("large")
  assert w.masking.strategy == "whole_word" and w.data.format == "segment_pair"
  assert w.model.num_layers == 24
  m = mosaicbert.get_config()
  assert m.masking.mask_rate == 0.30 and m.data.seq_len == 128
  assert m.masking.max_predictions_per_seq >= round(0.30 * 126)
  assert (m.train.batch_size, m.train.steps, m.optimizer.learning_rate) == (4096, 70_000, 5e-4)
  assert m.optimizer.warmup_steps == round(0.06 * 70_000)
  assert (m.optimizer.adam_b2, m.optimizer.adam_eps) == (0.98, 1e-6)
  # Decoupled weight decay 1e-5 (Composer) = optax adamw's weight_decay * peak lr.
  assert abs(m.optimizer.weight_decay * m.optimizer.learning_rate - 1e-5) < 1e-12
  assert m.data.format == "full_sentences"


@pytest.mark.parametrize("size,layers,hidden,heads,mlp,lr", [
    ("base", 22, 768, 12, 1152, 8e-4), ("large", 28, 1024, 16, 2624, 5e-4)])
def test_modernbert(size, layers, hidden, heads, mlp, lr):
  c = modernbert.get_config(size)
  m = c.model
  assert (m.num_layers, m.hidden_size, m.num_heads, m.intermediate_size) == (
      layers, hidden, heads, mlp)
  assert (m.norm_position, m.mlp, m.use_bias, m.position_embedding_type) == (
      "pre", "geglu", False, "rope")
  assert (m.local_attention_window, m.global_attention_every) == (128, 3)
  assert (m.rope_base, m.local_rope_base, m.layer_norm_eps) == (160_000, 10_000, 1e-5)
  assert m.dropout_rate == m.attention_dropout_rate == 0.0
  assert c.tokenizer.vocab_size == 50368
  assert (c.masking.mask_rate, c.data.seq_len, c.data.format) == (0.30, 1024, "full_sentences")
  t, o = c.train, c.optimizer
  assert (o.learning_rate, o.adam_b1, o.adam_b2, o.adam_eps) == (lr, 0.9, 0.98, 1e-6)
  assert (o.schedule, o.decay_shape, t.batch_size, o.update_clip_rms) == ("wsd", "sqrt", 4608, 1.0)
  assert abs(o.weight_decay * o.learning_rate - 1e-5) < 1e-12
  assert abs(t.steps * t.batch_size * 1024 - 1.7e12) < 1024 * t.batch_size  # 1.7T tokens


def test_unknown_size_is_a_clear_error():
  with pytest.raises(ValueError, match="unknown BERT size 'huge'; choose one of tiny, mini"):
    bert.get_config("huge")


def test_biphasic_is_modernbert_with_a_quarter_of_causal_lm_first():
  c = biphasic.get_config("large")
  assert c.model == modernbert.get_config("large").model
  assert RunSettings.from_config(c).to_config_dict().train.phases == (
      (0.25, 1024, 307, {"objective": "clm"}), (0.75, 1024, 307))
  plan = phases.plan(RunSettings.from_config(c))
  assert [(p.objective, p.predictions) for p in plan] == [("clm", 1023), ("mlm", 307)]
