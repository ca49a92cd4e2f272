"""config_check: every config rule, one exact line each, before anything is written."""

import pytest

from mlmjax.configs import base
from mlmjax.configs import tiny
from mlmjax import errors
from mlmjax.training import config_check
from mlmjax.training import train


def _config(**masking):
  config = base.get_config()
  config.masking.update(masking)
  return config


@pytest.mark.parametrize("overrides,message", [
    (dict(strategy="bert"), "masking.strategy='bert' is not one of random, whole_word, span,"
     " entity, frequency, adaptive, syntax, semantic, contextual, mixture, static"),
    (dict(mask_rate=1.0), "masking.mask_rate=1.0 must be strictly between 0 and 1"),
    (dict(replacement="zipf"), "masking.replacement='zipf' is not one of uniform, unigram"),
    (dict(strategy="mixture", mixture=""), "masking.strategy='mixture' needs masking.mixture,"
     " e.g. 'random=0.5,span=0.3,whole_word=0.2'"),
    (dict(strategy="mixture", mixture="random=0.5,span"), "masking.mixture item 'span' is not"
     " strategy=weight, e.g. 'random=0.5,span=0.3,whole_word=0.2'"),
    (dict(strategy="mixture", mixture="random=1,mixture=1"), "masking.mixture: 'mixture' is"
     " not one of random, whole_word, span, entity, frequency, adaptive, syntax, semantic,"
     " contextual, static"),
    (dict(strategy="mixture", mixture="random=1,spam=1"), "masking.mixture: 'spam' is not one"
     " of random, whole_word, span, entity, frequency, adaptive, syntax, semantic, contextual,"
     " static"),
    (dict(strategy="mixture", mixture="random=1,span=-1"), "masking.mixture: the weight of"
     " 'span' must be a positive number, got '-1'"),
    (dict(strategy="mixture", mixture="random=1,span=x"), "masking.mixture: the weight of"
     " 'span' must be a positive number, got 'x'"),
    (dict(strategy="mixture", mixture="span=1,span=2"), "masking.mixture names 'span' twice"),
    (dict(strategy="span", span_p=0.0), "masking.span_p=0.0 must be in (0, 1] (SpanBERT: 0.2)"),
    (dict(strategy="mixture", mixture="random=1,span=1", span_max_words=0),
     "masking.span_max_words=0 must be >= 1 (SpanBERT: 10)"),
    (dict(strategy="frequency", frequency_alpha=-0.5), "masking.frequency_alpha=-0.5 must be"
     " >= 0 (0: uniform, 1: inverse frequency)"),
    (dict(strategy="static", dupe_factor=0), "masking.dupe_factor=0 must be >= 1"),
    (dict(strategy="static", static_strategy="mixture"), "masking.static_strategy='mixture' is"
     " not one of random, whole_word, span, entity, frequency, syntax, semantic, contextual"),
    (dict(strategy="entity", entity_heuristic=False), "masking.strategy 'entity' needs"
     " masking.entity_ner=True, masking.entity_heuristic=True or a masking.entity_gazetteer"
     " file (one phrase per line)"),
    (dict(strategy="entity", entity_ner=True, entity_labels="PERSON,NAMES"),
     "masking.entity_labels: 'NAMES' is not one of PERSON, NORP, FAC, ORG, GPE, LOC, PRODUCT,"
     " EVENT, WORK_OF_ART, LAW, LANGUAGE, DATE, TIME, PERCENT, MONEY, QUANTITY, ORDINAL,"
     " CARDINAL, PER, MISC"),
    (dict(strategy="syntax", syntax_unit="clause"), "masking.syntax_unit='clause' is not one"
     " of word, noun_chunk, subtree"),
    (dict(strategy="syntax", syntax_weights="NOUN=3,VERB"), "masking.syntax_weights item"
     " 'VERB' is not TAG=weight with a weight >= 0, e.g. 'NOUN=3,VERB=2,ROOT=2'"),
    (dict(strategy="syntax", syntax_weights="NOUNS=3"), "masking.syntax_weights: 'NOUNS' is"
     " neither a universal POS tag (ADJ, ADP, ADV, AUX, CCONJ, DET, INTJ, NOUN, NUM, PART,"
     " PRON, PROPN, PUNCT, SCONJ, SYM, VERB, X) nor a dependency relation"),
    (dict(strategy="syntax", syntax_unit="subtree", phrase_max_words=0),
     "masking.phrase_max_words=0 must be >= 1"),
    (dict(strategy="semantic", pmi_ngrams=-1), "masking.pmi_ngrams=-1 must be >= 0 (0: sized"
     " by masking.pmi_coverage) and masking.pmi_min_count=11 >= 1"),
    (dict(strategy="semantic", pmi_coverage=0.0), "masking.pmi_coverage=0.0 must be in (0, 1]:"
     " the share of words inside a kept n-gram"),
    (dict(strategy="semantic", pmi_score="counts"),
     "masking.pmi_score='counts' is not one of pmi, p2"),
    (dict(strategy="semantic", pmi_length_shares=(0.5, 0.5, 0.5, 0.5)),
     "masking.pmi_length_shares=(0.5, 0.5, 0.5, 0.5) must be 4 shares (of 2-, 3-, 4- and"
     " 5-grams) >= 0 summing to 1"),
    (dict(strategy="entity", entity_probability=0.0), "masking.entity_probability=0.0 must be"
     " in (0, 1] (1: entities first)"),
    (dict(strategy="contextual", stats_max_documents=0), "masking.strategy 'semantic' and"
     " 'contextual' count word co-occurrences: set masking.stats_max_documents > 0"),
    (dict(strategy="contextual", contextual_candidates=0),
     "masking.contextual_candidates=0 must be >= 1 (1: whole-word masking)"),
    (dict(strategy="entity", entity_gazetteer="no/such/names.txt"),
     "masking.entity_gazetteer: 'no/such/names.txt' does not exist"),
    (dict(strategy="adaptive", adaptive_every_steps=0), "masking.adaptive_every_steps=0 must"
     " be >= 1"),
    (dict(max_predictions_per_seq=0), "masking.max_predictions_per_seq=0 must be >= 1"),
    (dict(adaptive_decay=1.0), "masking.adaptive_decay=1.0 must be in [0, 1)"),
    (dict(stats_max_documents=-1), "masking.stats_max_documents=-1 must be >= 0"),
    (dict(strategy="frequency", stats_max_documents=0), "masking.strategy 'frequency' needs"
     " token counts: set masking.stats_max_documents > 0"),
    (dict(replacement="unigram", stats_max_documents=0), "masking.replacement='unigram' needs"
     " token counts: set masking.stats_max_documents > 0"),
])
def test_masking_rules(overrides, message):
  with pytest.raises(errors.ConfigError) as e:
    config_check.checked(_config(**overrides), num_devices=1, num_processes=1)
  assert str(e.value) == message
  assert isinstance(e.value, errors.UserError)


def test_empty_gazetteer(tmp_path):
  empty = tmp_path / "empty.txt"
  empty.write_text("\n  \n", encoding="utf-8")
  with pytest.raises(errors.ConfigError) as e:
    config_check.checked(_config(strategy="entity", entity_gazetteer=str(empty)), 1, 1)
  assert str(e.value) == f"masking.entity_gazetteer: {str(empty)!r} has no phrases (one per line)"


def test_the_budget_rule_is_the_maskers_own_rounding():
  """0.15 x 510 maskable tokens = 76.5, which the masker rounds up to 77: 76 slots would pass
  a check that rounds to even (Python's round) and silently cap every full row."""
  config = _config(max_predictions_per_seq=76)
  config.data.seq_len = 512
  with pytest.raises(errors.ConfigError) as e:
    config_check.checked(config, 1, 1)
  assert str(e.value) == (
      "masking.max_predictions_per_seq=76 is too small for masking.mask_rate=0.15 at seq_len"
      " 512: a full row wants 77 predictions; set it to at least 77")
  config.masking.max_predictions_per_seq = 77
  config_check.checked(config, 1, 1)


@pytest.mark.parametrize("key,value,message", [
    ("model.num_heads", 5, "model.hidden_size=768 must be a positive multiple of"
                           " model.num_heads=5"),
    ("model.position_embedding_type", "alibi", "model.position_embedding_type='alibi' is not"
                                               " one of learned, rope"),
    ("optimizer.kind", "sgd", "optimizer.kind='sgd' is not one of adamw, lamb, muon"),
    ("train.nonfinite_policy", "ignore", "train.nonfinite_policy='ignore' is not one of skip,"
                                         " stop"),
    ("train.phases", ((0.5, 128, 20),), "train.phases=((0.5, 128, 20),): the fractions must"
     " sum to 1"),
    ("data.eval_every_nth_document", 1, "data.eval_every_nth_document=1 must be >= 2"),
    ("data.num_shards", 3, "data.num_shards=3 must be a multiple of the 1 processes and divide"
                           " train.batch_size=256"),
    ("mesh.shape", (2, 2), "config.mesh.shape=(2, 2) must have 3 positive entries ('data',"
                           " 'fsdp', 'tensor'), at most one of them -1"),
])
def test_other_rules(key, value, message):
  config = base.get_config()
  section, name = key.split(".")
  config[section][name] = value
  with pytest.raises(errors.ConfigError) as e:
    config_check.checked(config, 1, 1)
  assert str(e.value) == message


def test_every_preset_passes():
  # pylint: disable-next=g-import-not-at-top
  from mlmjax.configs import bert, modernbert, mosaicbert, roberta, spanbert, wwm
  configs = [tiny.get_config(), spanbert.get_config(), wwm.get_config(),
             mosaicbert.get_config(), *(bert.get_config(s) for s in bert.SIZES),
             *(roberta.get_config(s) for s in ("base", "large")),
             *(modernbert.get_config(s) for s in modernbert.SIZES)]
  for config in configs:
    config_check.checked(config, 8, 1)


def test_heads_not_dividing_hidden_is_one_cli_line_and_writes_nothing(tmp_path):
  config = tiny.get_config()
  config.model.num_heads = 3
  with pytest.raises(errors.ConfigError) as e:
    train.train_and_evaluate(config, str(tmp_path / "run"))
  assert str(e.value) == "model.hidden_size=128 must be a positive multiple of model.num_heads=3"
  assert not (tmp_path / "run").exists()
