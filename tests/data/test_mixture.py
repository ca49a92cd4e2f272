"""Weighted mixtures (data.sources, per phase): the proportions asked for, by arithmetic; a run
over a mixture that changes its weights at a phase switch resumes bit-identically; prepared
sources mix too; bad settings are one-line config errors."""

import collections

import numpy as np
import pytest

from conftest import assert_resumes_exactly, base_shape, build_input, prepare
from mlmjax.data.corpora import mixture
from mlmjax.errors import ConfigError
from mlmjax.training import config_check
from mlmjax.training.run import workdir as workdir_lib
from mlmjax.training import train


def test_documents_come_in_the_proportions_asked_for():
  small, large = [f"s{i}" for i in range(3)], [f"L{i}" for i in range(1000)]
  m = mixture.Mixture("m", [small, large], [0.25, 0.75])
  assert len(m) == 1000 // 3 * 4 + 4  # periods until the large source was read once
  counts = collections.Counter(m[j][0] for j in range(len(m)))
  assert counts["s"] / len(m) == 0.25
  assert [m[j] for j in range(8)] == ["s0", "L0", "L1", "L2", "s1", "L3", "L4", "L5"]
  assert {m[j] for j in range(len(m)) if m[j][0] == "L"} == set(large)  # read whole, in order
  again = m.reweighted([0.9, 0.1])
  assert collections.Counter(again[j][0] for j in range(len(again)))["s"] / len(again) == 0.9
  assert repr(again) == "Mixture('m', weights [0.9, 0.1], 10000 documents)"
  assert m[len(m) - 1] == m[-1] and m[2:4] == [m[2], m[3]]
  with pytest.raises(IndexError):
    m[len(m)]  # pylint: disable=pointless-statement


def _mixture_config(config, tmp_path):
  (tmp_path / "extra.txt").write_text("\n\n".join(
      f"An extra document number {i}.\nIt has two lines about item {i}." for i in range(60)))
  config.data.sources = f"0.7:builtin; 0.3:{tmp_path}/extra.txt"
  config.train.phases = ((0.5, 32, 6), (0.5, 32, 6))
  config.data.sources_phase_weights = "0.7,0.3; 0.2,0.8"  # the mix anneals in phase 1
  return config


@pytest.mark.slow
def test_a_run_over_a_mixture_resumes_exactly_across_its_weight_switch(tmp_path, micro_config,
                                                                       caplog):
  config = _mixture_config(micro_config, tmp_path)
  straight, split = str(tmp_path / "straight"), str(tmp_path / "split")
  train.train_and_evaluate(config, straight)
  assert_resumes_exactly(config, straight, split, 6, caplog)  # stopped inside phase 1

  # Each phase's input reads its own mix.
  run = workdir_lib.Workdir(straight)
  inp = build_input(config, run.tokenizers, run.vocab_stats)
  for phase, extra_share in ((0, 0.3), (1, 0.8)):
    source = inp.train_source.reweighted(mixture.phase_weights(config.data, phase))
    share = np.mean([source.locate(j)[0] for j in range(1000)])
    assert share == pytest.approx(extra_share)


def test_prepared_sources_mix(tmp_path, micro_config, tokenizer_path):
  from mlmjax.configs import tiny  # pylint: disable=g-import-not-at-top
  (tmp_path / "extra.txt").write_text("\n\n".join(f"Extra document {i}." for i in range(40)))
  prep = tiny.get_config()
  prep.tokenizer.path = tokenizer_path
  prepare(prep, f"{tmp_path}/extra.txt", str(tmp_path / "a"), num_files=2)
  prepare(prep, "builtin", str(tmp_path / "b"), num_files=2)
  micro_config.data.sources = f"1:prepared:{tmp_path}/a; 3:prepared:{tmp_path}/b"
  run = workdir_lib.Workdir(str(tmp_path / "run"))
  run.make_writable()
  inp = build_input(micro_config, run.tokenizers, run.vocab_stats)
  source = inp.train_source
  assert isinstance(source, mixture.PreparedMixture)
  # The weights hold for prepared data: a quarter of the documents read back (tokens, decoded)
  # are the extra file's, three quarters the built-in corpus's.
  texts = [inp.tokenizer.decode(np.concatenate(source.sentences(j))) for j in range(400)]
  assert sum(t.startswith("Extra document") for t in texts) == 100
  batch = next(inp.train_iter(base_shape(micro_config)))
  assert batch["input_ids"].shape == (micro_config.train.batch_size, micro_config.data.seq_len)
  micro_config.data.sources = f"1:prepared:{tmp_path}/a; 3:builtin"
  with pytest.raises(ConfigError, match="mixes prepared data and raw text"):
    build_input(micro_config, run.tokenizers, run.vocab_stats)


@pytest.mark.parametrize("sources,phase_weights,phases,message", [
    ("0.5 builtin", "", (), r"'0.5 builtin' is not WEIGHT:SOURCE"),
    ("-1:builtin", "", (), r"'-1:builtin' is not WEIGHT:SOURCE with a weight >= 0"),
    ("0:builtin", "", (), r"needs at least one source with a weight > 0"),
    ("1:builtin; 1:builtin", "1,1", ((0.5, 32, 6), (0.5, 32, 6)),
     r"data.sources_phase_weights has 1 groups; phase 1 has none"),
    ("1:builtin; 1:builtin", "1; 1,1", ((0.5, 32, 6), (0.5, 32, 6)),
     r"group 0 \('1'\) must be 2 comma-separated weights"),
    ("", "1,1", (), r"data.sources_phase_weights needs data.sources"),
])
def test_bad_mixture_settings_are_config_errors(micro_config, sources, phase_weights, phases,
                                                message):
  micro_config.data.sources, micro_config.data.sources_phase_weights = sources, phase_weights
  micro_config.train.phases = phases
  with pytest.raises(ConfigError, match=message):
    config_check.checked(micro_config)


def test_data_source_and_sources_are_exclusive(micro_config):
  micro_config.data.sources = "1:builtin"
  micro_config.data.source = "corpus/*.txt"
  with pytest.raises(ConfigError, match=r"replaces data.source='corpus/\*.txt': set one"):
    config_check.checked(micro_config)
