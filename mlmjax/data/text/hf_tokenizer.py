"""Hugging Face tokenizers (WordPiece, byte-level BPE, ...) behind mlmjax's tokenizer interface,
and the conversion of mlmjax's sentencepiece models into Hugging Face fast tokenizers.

mlmjax's special ids are fixed ([PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4): data, masking and
losses rely on them. A Hugging Face tokenizer has its own (BERT: [PAD]=0 [UNK]=100 [CLS]=101
[SEP]=102 [MASK]=103; RoBERTa: <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=50264). `HFTokenizer`
hands out mlmjax ids through a permutation that swaps the five special tokens into ids 0-4 and
leaves every other id where it was (`vocab_to_hf[mlmjax id] = HF id`); importing a checkpoint
permutes its embedding rows the same way (hf/convert.py). Rather than rewriting the
tokenizer's vocabulary, this keeps its files exactly as published: they are saved unchanged in
the workdir, the permutation is a function of them (nothing else to store), and an export
writes the weights back in the tokenizer's own ids, next to the same files.

The files are those `save_pretrained` writes (tokenizer.json, tokenizer_config.json, ...); the
`tokenizers` library runs tokenizer.json, and the special tokens' roles come from
tokenizer_config.json. Reading a model folder (`load`) goes through `transformers`, which
also turns a folder holding only vocab.txt (or a slow tokenizer) into those files.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import numpy as np

from mlmjax import errors
from mlmjax import paths

# Special-token roles in mlmjax id order: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.
ROLES = ("pad", "unk", "cls", "sep", "mask")
_MARKER = "mlmjax_huggingface_tokenizer"  # key of the serialised form (to_bytes)
_WORD_START = "\u2581"  # sentencepiece's word-start mark, the convention of word_pieces()


class HFTokenizerError(errors.UserError):
  """A Hugging Face tokenizer mlmjax cannot use, with what is wrong."""


def special_first(special_hf_ids: list[int], vocab_size: int) -> np.ndarray:
  """`vocab_to_hf`: the permutation of 0..V-1 that puts HF id special_hf_ids[k] at mlmjax id
  k by swaps, so every id that is neither special nor displaced keeps its number."""
  to_hf = np.arange(vocab_size)
  for k, hf_id in enumerate(special_hf_ids):
    j = int(np.flatnonzero(to_hf == hf_id)[0])
    to_hf[k], to_hf[j] = to_hf[j], to_hf[k]
  return to_hf


def _token_text(value) -> str | None:
  """A special token as tokenizer_config.json stores it: a string or an AddedToken dict."""
  return value.get("content") if isinstance(value, dict) else value


class HFTokenizer:
  """mlmjax ids over a Hugging Face fast tokenizer (the same methods as tokenizer.Tokenizer)."""

  kind = "huggingface"

  def __init__(self, files: dict[str, str], path: str = "<memory>"):
    import tokenizers  # pylint: disable=g-import-not-at-top  # the optional [hf] extra
    self.files, self.path = files, path
    if "tokenizer.json" not in files or "tokenizer_config.json" not in files:
      raise HFTokenizerError(f"{path}: needs tokenizer.json and tokenizer_config.json")
    self.tk = tokenizers.Tokenizer.from_str(files["tokenizer.json"])
    # Whole texts, never cut or padded; and like sentencepiece's control symbols, a "[MASK]"
    # typed into a document is text, not the special token.
    self.tk.no_truncation()
    self.tk.no_padding()
    self.tk.encode_special_tokens = True
    config = json.loads(files["tokenizer_config.json"])
    self.special_tokens = {r: _token_text(config.get(f"{r}_token")) for r in ROLES}
    ids = {r: self.tk.token_to_id(t) if t else None for r, t in self.special_tokens.items()}
    if None in ids.values() or len(set(ids.values())) < len(ROLES):
      raise HFTokenizerError(
          f"{path}: mlmjax needs five distinct special tokens (pad, unk, cls, sep, mask) in"
          f" the vocabulary; this tokenizer has {self.special_tokens} (ids {ids})")
    self.vocab_size = self.tk.get_vocab_size(with_added_tokens=True)
    self.vocab_to_hf = special_first([ids[r] for r in ROLES], self.vocab_size)
    self._from_hf = np.argsort(self.vocab_to_hf)

  def __len__(self) -> int:
    return self.vocab_size

  def encode(self, texts: list[str]) -> list[list[int]]:
    """Batched encode (in mlmjax ids, no special tokens added)."""
    encodings = self.tk.encode_batch_fast(list(texts), add_special_tokens=False)
    return [self._from_hf[np.asarray(e.ids, np.int64)].tolist() for e in encodings]

  def encode_offsets(self, texts: list[str]) -> list[tuple[list[int], np.ndarray, np.ndarray]]:
    """encode, with each piece's [start, end) in characters of its text (annotation.py)."""
    out = []
    for e in self.tk.encode_batch(list(texts), add_special_tokens=False):
      offsets = np.asarray(e.offsets, np.int64).reshape(-1, 2)
      out.append((self._from_hf[np.asarray(e.ids, np.int64)].tolist(), offsets[:, 0],
                  offsets[:, 1]))
    return out

  def id_to_piece(self, i: int) -> str:
    return self.tk.id_to_token(int(self.vocab_to_hf[int(i)]))

  def decode(self, ids) -> str:
    return self.tk.decode([int(self.vocab_to_hf[int(i)]) for i in ids],
                          skip_special_tokens=False)

  def special_mask(self) -> np.ndarray:
    """[V] bool: mlmjax's five and every other special token of the tokenizer."""
    mask = np.zeros(self.vocab_size, bool)
    mask[:len(ROLES)] = True
    hf_special = [i for i, t in self.tk.get_added_tokens_decoder().items() if t.special]
    mask[self._from_hf[hf_special]] = True
    return mask

  def word_pieces(self) -> list[str]:
    """Every id's piece in sentencepiece's convention (a word start begins with U+2581), for
    the word tables of vocab_stats.py: WordPiece marks continuations ("##ing"), byte-level
    BPE marks word starts ("Ġthe"), Metaspace tokenizers already use U+2581."""
    spec = json.loads(self.files["tokenizer.json"])
    model, pre = spec.get("model") or {}, json.dumps(spec.get("pre_tokenizer"))
    pieces = [self.id_to_piece(i) or "" for i in range(self.vocab_size)]
    if model.get("type") == "WordPiece":
      cont = model.get("continuing_subword_prefix") or "##"
      return [p[len(cont):] if p.startswith(cont) else _WORD_START + p for p in pieces]
    if '"ByteLevel"' in pre:
      return [_WORD_START + p[1:] if p.startswith("\u0120") else p for p in pieces]
    return pieces

  def to_bytes(self) -> bytes:
    """Everything needed to rebuild this tokenizer (grain workers build their own)."""
    return json.dumps({_MARKER: self.files}).encode("utf-8")

  @classmethod
  def from_bytes(cls, data: bytes) -> "HFTokenizer":
    return cls(json.loads(data.decode("utf-8"))[_MARKER])

  def save(self, path: str) -> None:
    """Writes the tokenizer files into the folder `path`, atomically (a crash leaves either
    no folder or a complete one)."""
    if paths.is_remote(path):  # objects appear whole; the folder has no rename: files one by one
      write_files(self.files, path)
      return
    tmp = f"{path}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    write_files(self.files, tmp)
    if os.path.isdir(path):
      shutil.rmtree(path)
    os.rename(tmp, path)

  @classmethod
  def load(cls, path: str) -> "HFTokenizer":
    """The tokenizer of a Hugging Face model folder, in whichever form transformers reads
    (tokenizer.json, or vocab.txt / vocab.json + merges.txt, or a slow tokenizer)."""
    return cls(_pretrained_files(path), path)


def is_serialized(data: bytes) -> bool:
  """True for `HFTokenizer.to_bytes()` output (a sentencepiece model is a binary protobuf)."""
  return data.startswith(b'{"' + _MARKER.encode() + b'"')


def write_files(files: dict[str, str], folder: str) -> None:
  paths.makedirs(folder)
  for name, text in files.items():
    paths.write_atomic(paths.join(folder, name), text)


def _saved_files(tokenizer) -> dict[str, str]:
  """The files `save_pretrained` writes for a transformers fast tokenizer, as text."""
  with tempfile.TemporaryDirectory() as tmp:
    tokenizer.save_pretrained(tmp)
    files = {}
    for name in sorted(os.listdir(tmp)):
      with open(os.path.join(tmp, name), encoding="utf-8") as f:
        files[name] = f.read()
  return files


def _pretrained_files(path: str) -> dict[str, str]:
  try:
    import transformers  # pylint: disable=g-import-not-at-top  # the optional [hf] extra
  except ImportError:
    raise HFTokenizerError(f"{path} is a Hugging Face tokenizer: install mlmjax's [hf] extra"
                           " (pip install -e '.[hf]')") from None
  if not paths.isdir(path):
    raise HFTokenizerError(f"tokenizer folder {path!r} does not exist")
  if paths.is_remote(path):  # transformers reads local folders (or the hub) only
    with tempfile.TemporaryDirectory() as local:
      paths.download(path, local)
      return _pretrained_files(local)
  try:
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, use_fast=True)
  # ImportError: a tokenizer class that needs another package (RoFormer's own needs jieba).
  except (OSError, ValueError, TypeError, ImportError) as e:
    reason = " ".join(str(e).split())[:300]
    raise HFTokenizerError(f"{path}: no Hugging Face tokenizer could be read ({reason})"
                           ) from None
  if not tokenizer.is_fast:
    raise HFTokenizerError(f"{path}: transformers has no fast tokenizer for it")
  return _saved_files(tokenizer)


def from_sentencepiece(tok, model_max_length: int) -> dict[str, str]:
  """The files of a transformers fast tokenizer that gives the same ids as mlmjax's
  sentencepiece tokenizer `tok` (transformers' own SpmConverter: the same pieces, scores and
  normalisation), with the special tokens at mlmjax's ids and BERT's [CLS] A [SEP] B [SEP]
  template."""
  from tokenizers import processors  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  # (`from transformers import convert_slow_tokenizer` may give the function of that name.)
  from transformers.convert_slow_tokenizer import (  # pylint: disable=g-import-not-at-top
      SpmConverter)

  class _Converter(SpmConverter):
    def post_processor(self):
      return processors.TemplateProcessing(
          single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
          special_tokens=[("[CLS]", 2), ("[SEP]", 3)])

  with tempfile.TemporaryDirectory() as tmp:
    model_file = os.path.join(tmp, "spm.model")
    tok.save(model_file)
    # The converter reads the model from `original_tokenizer.vocab_file`: all it needs.
    backend = _Converter(_ModelFile(model_file)).converted()
  fast = transformers.PreTrainedTokenizerFast(
      tokenizer_object=backend, model_max_length=model_max_length,
      # BERT's inputs, token types included (the NSP head reads them): transformers 5's
      # generic fast tokenizer returns only input_ids and attention_mask unless told
      model_input_names=["input_ids", "token_type_ids", "attention_mask"],
      **{f"{role}_token": tok.id_to_piece(i) for i, role in enumerate(ROLES)})
  files = _saved_files(fast)
  # The class name transformers 4 and 5 both read: 5 saves its own (TokenizersBackend), which
  # 4.57 does not know.
  config = json.loads(files["tokenizer_config.json"])
  config["tokenizer_class"] = "PreTrainedTokenizerFast"
  files["tokenizer_config.json"] = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
  return files


class _ModelFile:
  def __init__(self, vocab_file: str):
    self.vocab_file = vocab_file
