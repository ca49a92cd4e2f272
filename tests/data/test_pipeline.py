"""Tokenizer, packing and the grain pipeline (sources: test_sources.py)."""

import collections
import re

import numpy as np
import pytest

from mlmjax.data.rows import formats
from mlmjax.data.text import tokenizer as tok_lib
from mlmjax.models import special_ids

from conftest import eval_iter, train_iter


def test_tokenizer_special_ids_and_roundtrip(tokenizer_path, tmp_path):
  tok = tok_lib.Tokenizer.load(tokenizer_path)
  assert [tok.id_to_piece(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  ids = tok.encode(["And God said, Let there be light: and there was light."])[0]
  assert min(ids) >= special_ids.NUM_SPECIAL
  assert tok.decode(ids) == "And God said, Let there be light: and there was light."
  # A literal "[MASK]" in text is not the control symbol.
  assert special_ids.MASK_ID not in tok.encode(["a [MASK] b"])[0]
  bad = tmp_path / "bad.model"
  bad.write_bytes(b"not a model")
  with pytest.raises(tok_lib.TokenizerError, match="not a sentencepiece model"):
    tok_lib.Tokenizer.load(str(bad))


@pytest.mark.parametrize("data_format", formats.FORMATS)
def test_pipeline_batches_and_exact_restore(micro_config, corpus, make_masker, data_format):
  micro_config.data.format = data_format
  tok = tok_lib.Tokenizer.load(micro_config.tokenizer.path)
  it = train_iter(micro_config, tok, corpus[0], make_masker(micro_config))
  first = next(it)
  b = micro_config.train.batch_size
  assert first["input_ids"].shape == (b, 32)
  assert first["masked_positions"].shape == (b, 6)
  if data_format == "full_sentences":
    assert (first["segment_ids"] > 0).mean() > 0.8  # packing leaves little padding
  assert ("nsp_labels" in first) == formats.has_pair_labels(data_format)
  for _ in range(3):
    next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(3)]
  again = train_iter(micro_config, tok, corpus[0], make_masker(micro_config))
  again.set_state(state)
  for want in expected:
    got = next(again)
    for k in want:
      np.testing.assert_array_equal(got[k], want[k])


def test_eval_iter_is_fixed(micro_config, corpus, make_masker):
  tok = tok_lib.Tokenizer.load(micro_config.tokenizer.path)
  a = list(eval_iter(micro_config, tok, corpus[1], make_masker(micro_config)))
  b = list(eval_iter(micro_config, tok, corpus[1], make_masker(micro_config)))
  assert len(a) == micro_config.train.eval_batches
  for x, y in zip(a, b):
    for k in x:
      np.testing.assert_array_equal(x[k], y[k])


@pytest.mark.parametrize("data_format", ["doc_sentences", "segment_pair"])
def test_rows_of_a_long_document_spread_over_batches(data_format, micro_config, tokenizer_path,
                                                     make_masker):
  """Without the row shuffle window, a document of ~10 rows filled most of a 16-row batch."""
  from mlmjax.data.corpora import sources  # pylint: disable=g-import-not-at-top
  tok = tok_lib.Tokenizer.load(tokenizer_path)
  names = ["Moses", "Aaron", "David", "Israel", "Judah", "Egypt", "Jacob", "Joseph", "Samuel",
           "Saul"]
  docs = [" ".join([f"And {names[i // 10]} saw {names[i % 10]} there."] * 40) for i in range(100)]
  train = sources.TextSource("numbered", docs, 50, held_out=False)
  micro_config.data.format = data_format
  it = train_iter(micro_config, tok, train, make_masker(micro_config))
  for _ in range(4):
    batch = next(it)
    original = batch["input_ids"].copy()  # unmasked: a masked "saw" would hide the pair
    rows, _ = np.nonzero(batch["masked_weights"])
    original[rows, batch["masked_positions"][batch["masked_weights"] > 0]] = (
        batch["masked_ids"][batch["masked_weights"] > 0])
    owners = []
    for ids in original:
      pairs = re.findall(r"(\w+) saw (\w+)", tok.decode([i for i in ids if i >= special_ids.NUM_SPECIAL]))
      owners.append(collections.Counter(pairs).most_common(1)[0][0])
    assert collections.Counter(owners).most_common(1)[0][1] <= 4, owners


def test_document_order_is_a_fresh_permutation_every_epoch():
  from mlmjax.data import shard_walk  # pylint: disable=g-import-not-at-top
  for n in (1, 2, 3, 1000, 70_001):
    x = np.arange(n, dtype=np.uint64)
    orders = [shard_walk.permutation(x, n, (0, 0, epoch)) for epoch in (0, 1)]
    for order in orders:
      np.testing.assert_array_equal(np.sort(order), x)
    if n >= 1000:
      assert np.mean(orders[0] == orders[1]) < 0.01 and np.mean(orders[0] == x) < 0.01
