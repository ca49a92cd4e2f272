"""Export to and import from Hugging Face, end to end: real runs, the real `mlmjax.export`
command, transformers (torch, CPU) loading what was written, and runs started from it."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import transformers

from mlmjax.configs import tiny
from conftest import REPO, base_shape, build_input, user_env
from mlmjax.data.text import sentences
from mlmjax.hf import exporter
from mlmjax.inference import fill_mask as predict
from mlmjax.training import config_check
from mlmjax.training import finished_run
from mlmjax.training.run import workdir as workdir_lib
from mlmjax.training.run_settings import RunSettings
from mlmjax.training import train

# pretrained runs, the export command, transformers (torch) loading them
pytestmark = [pytest.mark.slow, pytest.mark.torch]

transformers.logging.set_verbosity_error()

TEXTS = ["Café, naïve résumé: “quoted” — 3.14159 and 2,024 years!",
         "And the LORD spake unto Moses, saying,", "ÆØÅ ﬁ ＡＢＣ １２３ x",
         "don't (can't) won't..."]
MASKED_TEXT = "In the beginning God created the [MASK] and the earth."


def _short(config):
  """A run of 4 steps (compilation dominates) with one eval and one checkpoint."""
  config.train.update(batch_size=8, steps=4, log_every_steps=1, eval_every_steps=4, eval_batches=1,
                      checkpoint_every_steps=4)
  config.optimizer.update(warmup_steps=1)
  config.model.dropout_rate = config.model.attention_dropout_rate = 0.0
  config.masking.stats_max_documents = 50  # token counts: unused by random masking
  return config


def _bert_config(tokenizer_path: str = ""):
  """A learned-position model with BERT's segment pairs and NSP head. The runs that start from
  Hugging Face checkpoints below use this config as well, so that their train and eval steps
  are the same programs (the session's compilation cache compiles them once)."""
  config = _short(tiny.get_config())
  config.tokenizer.path = tokenizer_path
  config.data.format = "segment_pair"
  config.data.seq_len = 32
  config.masking.mask_rate = 0.15
  config.masking.max_predictions_per_seq = 6
  config.model.position_embedding_type = "learned"
  config.model.update(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                      max_position_embeddings=64)
  return config


@pytest.fixture(scope="module")
def tiny_run(tokenizer_path, tmp_path_factory):
  """The tiny config (rotary positions) pretrained for a few steps on 32-token rows."""
  config = _short(tiny.get_config())
  config.tokenizer.path = tokenizer_path
  config.data.seq_len = 32
  workdir = str(tmp_path_factory.mktemp("tiny"))
  train.train_and_evaluate(config, workdir)
  return workdir


@pytest.fixture(scope="module")
def bert_run(tokenizer_path, tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("bert"))
  train.train_and_evaluate(_bert_config(tokenizer_path), workdir)
  return workdir


@pytest.fixture(scope="module")
def tiny_export(tiny_run, tmp_path_factory):
  """Written by the real command, as a user runs it."""
  out = str(tmp_path_factory.mktemp("exports") / "tiny")
  proc = subprocess.run([sys.executable, "-m", "mlmjax.export", f"--workdir={tiny_run}",
                         f"--out={out}"], cwd=REPO, env=user_env(), capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "(RoFormer, sentencepiece tokenizer, 512 ids)" in proc.stdout
  assert "verified with transformers: max |logit difference|" in proc.stdout
  return out


@pytest.fixture(scope="module")
def bert_export(bert_run, tmp_path_factory):
  out = str(tmp_path_factory.mktemp("exports") / "bert")
  exporter.export(finished_run.load(bert_run), out)
  return out


def _hf_batch(batch: dict, to_hf: np.ndarray, model_type: str) -> dict:
  """An mlmjax batch of single-sequence rows as transformers' inputs (HF ids)."""
  import torch  # pylint: disable=g-import-not-at-top (the `torch` marker)
  assert batch["segment_ids"].max() == 1  # no packing: a 2-D attention mask says it all
  out = {"input_ids": torch.from_numpy(to_hf[batch["input_ids"]]),
         "attention_mask": torch.from_numpy((batch["segment_ids"] > 0).astype(np.int64)),
         "token_type_ids": torch.from_numpy(batch["token_type_ids"].astype(np.int64))}
  if model_type == "bert":  # RoFormer's positions are always 0..T-1, RoBERTa's 2..T+1
    out["position_ids"] = torch.from_numpy(batch["positions"].astype(np.int64))
  if model_type == "roberta":  # one token type; mlmjax's type 1 starts equal to type 0
    out["token_type_ids"] = torch.zeros_like(out["token_type_ids"])
  return out


def _hf_losses(folder: str, batch: dict, to_hf: np.ndarray) -> dict[str, float]:
  """The mean MLM (and NSP) cross-entropy of the transformers model in `folder` on `batch`,
  as mlmjax defines them (weighted mean over the masked slots, mean over rows)."""
  import torch  # pylint: disable=g-import-not-at-top (the `torch` marker)
  config = transformers.AutoConfig.from_pretrained(folder)
  nsp = config.architectures == ["BertForPreTraining"]
  cls = transformers.BertForPreTraining if nsp else transformers.AutoModelForMaskedLM
  model = cls.from_pretrained(folder).eval()
  with torch.no_grad():
    out = model(**_hf_batch(batch, to_hf, config.model_type))
  logits = (out.prediction_logits if nsp else out.logits).numpy()
  logits = np.take_along_axis(logits, batch["masked_positions"][..., None], 1)
  logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)
                         ) - logits.max(-1, keepdims=True)
  xent = -np.take_along_axis(logp, to_hf[batch["masked_ids"]][..., None], -1)[..., 0]
  w = batch["masked_weights"]
  losses = {"loss": float((xent * w).sum() / w.sum())}
  if nsp:
    s = out.seq_relationship_logits.numpy()
    s = s - s.max(-1, keepdims=True)
    nsp_xent = np.log(np.exp(s).sum(-1)) - np.take_along_axis(
        s, batch["nsp_labels"][:, None], -1)[:, 0]
    losses["nsp_loss"] = float(nsp_xent.mean())
  return losses


def _first_batch(config, workdir: str) -> dict:
  """The batch that trained step 1 of the run in `workdir` (data and masks are a function of
  the config and the saved tokenizer)."""
  run = workdir_lib.Workdir(workdir)
  return next(build_input(config, run.tokenizers, run.vocab_stats).train_iter(
      base_shape(config)))


def _metrics(workdir: str) -> list[dict]:
  return [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]


@pytest.mark.parametrize("which", ["tiny", "bert"])
def test_transformers_computes_the_same_logits_as_mlmjax(which, tiny_run, tiny_export,
                                                         bert_run, bert_export):
  """A padded batch of texts through AutoModelForMaskedLM and through mlmjax, in float32."""
  import torch  # pylint: disable=g-import-not-at-top (the `torch` marker)
  workdir, out = (tiny_run, tiny_export) if which == "tiny" else (bert_run, bert_export)
  run = finished_run.load(workdir)
  config = json.load(open(os.path.join(out, "config.json")))
  assert config["architectures"] == (["RoFormerForMaskedLM"] if which == "tiny"
                                     else ["BertForPreTraining"])
  model = transformers.AutoModelForMaskedLM.from_pretrained(out).eval()
  tok = transformers.AutoTokenizer.from_pretrained(out)
  hf_in = tok(TEXTS, padding=True, return_tensors="pt")
  with torch.no_grad():
    hf_logits = model(**hf_in).logits.numpy()
  lengths = hf_in["attention_mask"].sum(1).tolist()
  rows = [hf_in["input_ids"][i, :n].tolist() for i, n in enumerate(lengths)]  # the same ids
  for i, mine in enumerate(exporter.mlm_logits(run, rows)):
    np.testing.assert_allclose(hf_logits[i, :lengths[i]], mine, atol=1e-4)
  if which == "bert":  # the NSP head too, with token types A and B
    pair = tok("In the beginning God created the heaven.", "And the earth was without form.",
               return_tensors="pt")
    with torch.no_grad():
      hf_out = transformers.BertForPreTraining.from_pretrained(out).eval()(**pair)
    n = pair["input_ids"].shape[1]
    batch = {"input_ids": pair["input_ids"].numpy().astype(np.int32),
             "token_type_ids": pair["token_type_ids"].numpy().astype(np.int32),
             "segment_ids": np.ones((1, n), np.int32),
             "positions": np.arange(n, dtype=np.int32)[None],
             "masked_positions": np.arange(n, dtype=np.int32)[None]}
    mine = run.model()(batch)
    np.testing.assert_allclose(hf_out.prediction_logits.numpy(), mine["mlm_logits"], atol=1e-4)
    np.testing.assert_allclose(hf_out.seq_relationship_logits.numpy(), mine["nsp_logits"],
                               atol=1e-4)


def test_exported_tokenizer_gives_mlmjax_ids(tiny_run, tiny_export, corpus):
  predictor = predict.Predictor(tiny_run)
  tok = transformers.AutoTokenizer.from_pretrained(tiny_export)
  assert tok.is_fast
  assert tok.convert_tokens_to_ids(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]) == [
      0, 1, 2, 3, 4]
  assert (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id,
          tok.mask_token_id) == (0, 1, 2, 3, 4)
  # How the pipeline tokenizes: sentence by sentence (accents, punctuation, digits included).
  texts = TEXTS + [s for doc in corpus[1][:5] for s in sentences.split_sentences(doc)]
  assert len(texts) > 100
  assert tok(texts, add_special_tokens=False)["input_ids"] == predictor.tok.encode(texts)
  # Special tokens: [CLS] text [SEP] with [MASK] in the text, as fill-mask and predict read it.
  for text in (MASKED_TEXT, "[MASK], said the [MASK]!", "3 [MASK] 4"):
    assert tok(text)["input_ids"] == predictor.encode(text)
  # BERT's inputs with token types, under a class name transformers 4.57 and 5 both know
  config = json.load(open(os.path.join(tiny_export, "tokenizer_config.json")))
  assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
  pair, first = tok("And God said,", "Let there be light."), tok("And God said,")["input_ids"]
  assert pair["token_type_ids"] == [0] * len(first) + [1] * (len(pair["input_ids"]) - len(first))


@pytest.mark.parametrize("which", ["tiny", "bert"])
def test_fill_mask_pipeline_gives_the_top_5_of_predict(which, tiny_run, tiny_export, bert_run,
                                                       bert_export):
  workdir, out = (tiny_run, tiny_export) if which == "tiny" else (bert_run, bert_export)
  fill_mask = transformers.pipeline("fill-mask", model=out, tokenizer=out, top_k=5)
  theirs = fill_mask(MASKED_TEXT)
  ours = predict.Predictor(workdir).fill_mask(MASKED_TEXT, 5)[0]
  tok = transformers.AutoTokenizer.from_pretrained(out)
  assert [tok.convert_ids_to_tokens(r["token"]).replace("\u2581", "") for r in theirs] == [
      piece for piece, _ in ours]
  np.testing.assert_allclose([r["score"] for r in theirs], [p for _, p in ours], atol=1e-6)


def test_round_trip_export_import_continues_with_the_exported_models_loss(
    bert_run, bert_export, tmp_path):
  """export -> init_from=hf: -> the first training loss (MLM and NSP) is the exported model's
  loss on the same batch, as transformers computes it."""
  config = _bert_config()
  config.model.hidden_size = 768  # set back from the checkpoint's config.json
  config.init_from = f"hf:{bert_export}"
  workdir = str(tmp_path / "continued")
  train.train_and_evaluate(config, workdir, stop_after=1)
  first = _metrics(workdir)[0]
  assert first["step"] == 1
  batch = _first_batch(train.with_init_from(RunSettings.from_config(config)), workdir)
  expected = _hf_losses(bert_export, batch, np.arange(512))
  assert first["loss"] == pytest.approx(expected["loss"], abs=1e-4)
  assert first["nsp_loss"] == pytest.approx(expected["nsp_loss"], abs=1e-4)
  saved = json.load(open(os.path.join(workdir, "config.json")))
  assert saved["model"]["hidden_size"] == 32 and saved["init_from"] == f"hf:{bert_export}"
  assert os.path.isdir(os.path.join(workdir, "tokenizer_hf"))  # the run needs only its workdir
  # The same command again resumes from the run's own checkpoint, not from the export.
  train.train_and_evaluate(config, workdir)
  assert [r["step"] for r in _metrics(workdir) if "loss" in r] == [1, 2, 3, 4]


# Shapes of _bert_config (512 ids, 64 positions, 2 types, LayerNorm eps 1e-12), so the runs
# from these checkpoints reuse that run's compiled steps.
_SIZES = dict(vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=64, layer_norm_eps=1e-12)


def _local_wordpiece_bert(folder: str, corpus) -> list[str]:
  """A BERT made by transformers here: a WordPiece vocabulary learned from the corpus, laid out
  like BERT's (specials at 0 and 100-103 between [unused] rows), random weights, no NSP head.
  Returns the special tokens (pad, unk, cls, sep, mask)."""
  from tokenizers import BertWordPieceTokenizer  # pylint: disable=g-import-not-at-top
  wp = BertWordPieceTokenizer(lowercase=True)
  wp.train_from_iterator(corpus[0][:200], vocab_size=600, special_tokens=[])
  words = [w for w, _ in sorted(wp.get_vocab().items(), key=lambda kv: kv[1])]
  head = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  vocab = head + words[:512 - len(head)]
  vocab += [f"[unused{i}]" for i in range(99, 99 + 512 - len(vocab))]
  os.makedirs(folder)
  with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(vocab) + "\n")
  transformers.BertTokenizerFast(os.path.join(folder, "vocab.txt")).save_pretrained(folder)
  model = transformers.BertForMaskedLM(transformers.BertConfig(
      **_SIZES, max_position_embeddings=64, type_vocab_size=2))
  _save_with_type_row_zero(model, folder)
  return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _local_bpe_roberta(folder: str, corpus) -> list[str]:
  """A RoBERTa made here: byte-level BPE learned from the corpus with RoBERTa's special ids
  (<s>=0 <pad>=1 </s>=2 <unk>=3, <mask> last), one token type, positions offset by 2."""
  from tokenizers import ByteLevelBPETokenizer  # pylint: disable=g-import-not-at-top
  bpe = ByteLevelBPETokenizer()
  bpe.train_from_iterator(corpus[0][:200], vocab_size=511,
                          special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
  os.makedirs(folder)
  bpe.save_model(folder)
  transformers.RobertaTokenizerFast(os.path.join(folder, "vocab.json"),
                                    os.path.join(folder, "merges.txt")).save_pretrained(folder)
  model = transformers.RobertaForMaskedLM(transformers.RobertaConfig(
      **_SIZES, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1))
  _save_with_type_row_zero(model, folder)
  return ["<pad>", "<unk>", "<s>", "</s>", "<mask>"]


def _save_with_type_row_zero(model, folder: str) -> None:
  """Saves random weights whose token type row 0 is far from zero: mlmjax must fold it."""
  import torch  # pylint: disable=g-import-not-at-top (the `torch` marker)
  torch.manual_seed(0)
  with torch.no_grad():
    model.base_model.embeddings.token_type_embeddings.weight.normal_(0.0, 0.5)
  model.save_pretrained(folder)


@pytest.mark.parametrize("make", [_local_wordpiece_bert, _local_bpe_roberta])
def test_checkpoint_made_by_transformers_imports_and_trains(make, tmp_path, corpus):
  """WordPiece BERT and byte-level BPE RoBERTa: the first loss is transformers' own on the
  same batch (special ids, positions and type 0 mapped right), the run trains, and exports
  back to the same tokenizer files and ids."""
  folder = str(tmp_path / "hf_model")
  specials = make(folder, corpus)
  config = _bert_config()
  config.init_from = f"hf:{folder}"
  workdir = str(tmp_path / "run")
  train.train_and_evaluate(config, workdir)
  rows = [r for r in _metrics(workdir) if "loss" in r]
  assert [r["step"] for r in rows] == [1, 2, 3, 4]
  assert np.isfinite([r["loss"] for r in rows]).all()

  tok = finished_run.load(workdir).tokenizer
  hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
  assert tok.kind == "huggingface"
  assert list(tok.vocab_to_hf[:5]) == hf_tok.convert_tokens_to_ids(specials)
  assert tok.encode(TEXTS) == [tok.vocab_to_hf.argsort()[ids].tolist() for ids in hf_tok(
      TEXTS, add_special_tokens=False)["input_ids"]]
  # Word starts for whole-word masking: WordPiece marks continuations ("##ing"), byte-level
  # BPE word starts ("Ġthe"); both become sentencepiece's "▁the".
  [the] = tok.encode([" the"])[0]
  assert tok.word_pieces()[the] == "\u2581the"
  batch = _first_batch(train.with_init_from(RunSettings.from_config(config)), workdir)
  assert (batch["input_ids"][:, 0] == 2).all()  # [CLS] is mlmjax's id 2, HF's own below
  expected = _hf_losses(folder, batch, tok.vocab_to_hf)
  assert rows[0]["loss"] == pytest.approx(expected["loss"], abs=1e-4)

  out = str(tmp_path / "export")
  run = finished_run.load(workdir)
  exporter.export(run, out)
  assert exporter.verify(run, out) <= 1e-4
  assert open(os.path.join(out, "tokenizer.json")).read() == open(
      os.path.join(folder, "tokenizer.json")).read()
  assert json.load(open(os.path.join(out, "config.json")))["pad_token_id"] == (
      hf_tok.pad_token_id)


def test_bad_init_from_and_export_targets_fail_with_one_clear_line(tmp_path, bert_run,
                                                                   bert_export):
  config = tiny.get_config()
  for value, message in [
      ("bert-base-uncased", "init_from='bert-base-uncased' must be 'hf:FOLDER'"),
      (f"hf:{tmp_path}/nowhere", "/nowhere': no config.json there (not a Hugging Face")]:
    config.init_from = value
    with pytest.raises(config_check.ConfigError, match=re.escape(message)):
      config_check.checked(config)
  config.init_from = f"hf:{bert_export}"
  config.tokenizer.path = "other.model"
  with pytest.raises(config_check.ConfigError, match="leave tokenizer.path empty"):
    train.with_init_from(RunSettings.from_config(config))
  with pytest.raises(exporter.ExportError, match="exists and is not an empty folder"):
    exporter.export(finished_run.load(bert_run), bert_export)


@pytest.mark.parametrize("kind", ["modernbert", "electra"])
def test_modern_block_and_electra_export_with_logit_parity(kind, tokenizer_path, tmp_path):
  """The modern block (pre-LN, GeGLU, no biases, sliding windows on alternate layers, two
  rotary bases, scanned layers) exports to ModernBertForMaskedLM; ELECTRA's discriminator
  (embeddings narrower than the encoder) to ElectraForPreTraining; both within 1e-4."""
  config = _short(tiny.get_config())
  config.tokenizer.path = tokenizer_path
  config.data.seq_len = 32
  config.model.update(hidden_size=32, num_layers=3, num_heads=2, intermediate_size=48,
                      max_position_embeddings=128)
  if kind == "modernbert":
    config.model.update(norm_position="pre", mlp="geglu", use_bias=False, scan_layers=True,
                        local_attention_window=8, global_attention_every=2,
                        rope_base=160_000.0, local_rope_base=10_000.0, layer_norm_eps=1e-5)
  else:
    config.objective.update(kind="electra", generator_fraction=0.5)
    config.model.update(position_embedding_type="learned", embedding_size=16)
  workdir, out = str(tmp_path / "run"), str(tmp_path / "hf")
  train.train_and_evaluate(config, workdir)
  run = finished_run.load(workdir)
  exporter.export(run, out)
  assert json.load(open(os.path.join(out, "config.json")))["model_type"] == kind
  # A long text: the sliding window (4 tokens each side) really cuts the local layers' view.
  text = " ".join(TEXTS)
  assert exporter.verify(run, out, text) < 1e-4
