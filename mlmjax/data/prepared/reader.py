"""Prepared data: a corpus tokenized once into ArrayRecord files (`python -m mlmjax.prepare`),
trained from with `data.source=prepared:DIR`.

    DIR/
      manifest.json        what the folder holds and how it was made; written last
      tokenizer.model      the tokenizer every record was made with
      tokenizer_stats.npz  its per-piece tables and token counts (vocab_stats.py), computed as
                           a run from the raw text computes them
      train-00000-of-00064.array_record ...   the training split, F files (here 64)
      eval-00000-of-00064.array_record ...    the held-out split

Layout. One record per document of a split, in the split's order: document i is record i // F
of file i % F. Data shard s of S reads documents s::S, so when S divides F it opens only the
files f = s (mod S): every process reads only its own files, lazily, and nothing scans the
corpus at start-up (the manifest has the counts). Files are written with group_size 1, so
reading a document decompresses that document only.

A record is what training needs of a document and no more: int32 n (sentences), n int32
sentence lengths, then the token ids of all sentences (uint16 when the vocabulary fits, else
int32); prepared with word annotations (annotation.py: the syntax and NER-entity masking
strategies), then each token's features as int16. Empty documents are kept (n = 0) so indices
match the raw split. Word starts are not
stored per token: whether a token starts a word is a property of its id (vocab_stats'
`word_start` and `punctuation` tables, stored once beside the tokenizer) that masking and the
pair formats look up per batch, as they do for raw text; nothing is recomputed per epoch.

manifest.json: {"format": "mlmjax-prepared", "version", "source", "tokenizer": {"fingerprint",
"vocab_size"}, "eval_every_nth_document", "max_document_chars", "stats_max_documents",
"num_files", "id_dtype", "splits": {"train"|"eval": {"documents", "sentences", "tokens",
"empty_documents"}}, and with annotations "annotations": {"pipeline", "features"}}.

A run checks it against its own settings, each mismatch refused in one line: the tokenizer
(`tokenizer.path`, or the tokenizer a resumed workdir already holds) by fingerprint, the
held-out split (`data.eval_every_nth_document`), and that its data shards divide F. The
tokenizer, document cutting and token counts are the data's own (the run copies them into its
workdir). A run may switch between a raw source and its prepared form at a checkpoint: both
give the same documents in the same order, so the data position carries over exactly.
"""

from __future__ import annotations

import hashlib
import json

from absl import logging
import grain
import numpy as np

from mlmjax import paths
from mlmjax.data.text import annotation
from mlmjax.data.text import tokenizer as tokenizer_lib
from mlmjax.data.text import vocab_stats as vocab_stats_lib
from mlmjax.errors import DataError

PREFIX = "prepared:"
MANIFEST, STATS = "manifest.json", "tokenizer_stats.npz"
# The data's tokenizer, by kind (as in a workdir).
TOKENIZERS = {"sentencepiece": "tokenizer.model", "huggingface": "tokenizer_hf"}
FORMAT, VERSION = "mlmjax-prepared", 1
SPLITS = ("train", "eval")
# One record per compressed chunk: random access to a document reads only that document.
WRITER_OPTIONS = "group_size:1"


def is_prepared(source: str) -> bool:
  return source.startswith(PREFIX)


def file_name(split: str, f: int, num_files: int) -> str:
  return f"{split}-{f:05d}-of-{num_files:05d}.array_record"


def fingerprint(tok: tokenizer_lib.Tokenizer) -> str:
  """Identifies a tokenizer (of any kind) by its serialized form."""
  return hashlib.sha256(tok.to_bytes()).hexdigest()[:16]


def id_dtype(vocab_size: int) -> str:
  return "uint16" if vocab_size <= 1 << 16 else "int32"


def encode_record(sentences: list[np.ndarray], dtype: str) -> bytes:
  """A document: its sentence count, their lengths, the ids; then, annotated ([n, 1 + F]
  sentences), the features [tokens, F] as int16."""
  lengths = np.array([len(s) for s in sentences], np.int32)
  if not sentences:
    return np.int32(0).tobytes()
  tokens = np.concatenate(sentences)
  out = [np.int32(len(sentences)).tobytes(), lengths.tobytes(),
         annotation.ids_of(tokens).astype(dtype).tobytes()]
  if tokens.ndim == 2:
    out.append(np.clip(tokens[:, 1:], -32768, 32767).astype(np.int16).tobytes())
  return b"".join(out)


def decode_record(record: bytes, dtype: str, features: int = 0) -> list[np.ndarray]:
  """encode_record's sentences: [n] ids, or with `features` F, [n, 1 + F]."""
  n = int(np.frombuffer(record, np.int32, count=1)[0])
  lengths = np.frombuffer(record, np.int32, count=n, offset=4)
  total = int(lengths.sum())
  ids = np.frombuffer(record, dtype, count=total, offset=4 * (n + 1)).astype(np.int32)
  if features:
    offset = 4 * (n + 1) + total * np.dtype(dtype).itemsize
    feats = np.frombuffer(record, np.int16, offset=offset).reshape(total, features)
    ids = np.concatenate([ids[:, None], feats.astype(np.int32)], axis=1)
  ends = np.cumsum(lengths).tolist()
  return [ids[a:b] for a, b in zip([0] + ends[:-1], ends)]  # views (np.split is ~10x slower)


class PreparedSplit:
  """One split of prepared data: len, `sentences(i)` (documents.py), a stable repr. Opens a
  file when it first reads from it; pickles without its open files (grain workers)."""

  def __init__(self, directory: str, split: str, num_documents: int, num_files: int,
               dtype: str, features: int = 0):
    self.directory, self.split = directory, split
    self._len, self._num_files, self._dtype = num_documents, num_files, dtype
    self._features = features  # word annotations per token (annotation.py), or 0
    self._files: dict[int, grain.sources.ArrayRecordDataSource] = {}

  @property
  def annotated(self) -> bool:
    return self._features > 0

  def __len__(self) -> int:
    return self._len

  def sentences(self, index: int) -> list[np.ndarray]:
    if not 0 <= index < self._len:
      raise IndexError(f"document {index} of {self._len}")
    f = index % self._num_files
    if f not in self._files:
      paths.use_storage_emulator()  # array_record reads gs:// with its own client
      self._files[f] = grain.sources.ArrayRecordDataSource(
          [paths.join(self.directory, file_name(self.split, f, self._num_files))])
    return decode_record(self._files[f][index // self._num_files], self._dtype,
                         self._features)

  def __getstate__(self):
    return {**self.__dict__, "_files": {}}

  def __repr__(self) -> str:  # in error messages; stable
    return f"PreparedSplit({self.directory!r}, {self.split!r}, {self._len} documents)"


class Prepared:
  """A prepared folder, opened through its manifest."""

  def __init__(self, directory: str, manifest: dict):
    self.directory, self.manifest = directory, manifest

  def split(self, name: str) -> PreparedSplit:
    m = self.manifest
    features = len(m.get("annotations", {}).get("features", ()))
    return PreparedSplit(self.directory, name, m["splits"][name]["documents"], m["num_files"],
                         m["id_dtype"], features)

  def check(self, every: int, tokenizer_path: str, num_shards: int) -> None:
    """The run's settings that the data fixed (module docstring): data.eval_every_nth_document
    `every`, tokenizer.path `tokenizer_path`, and files the `num_shards` shards divide."""
    m, d = self.manifest, self.directory
    if every != m["eval_every_nth_document"]:
      raise DataError(
          f"data.eval_every_nth_document={every}, but {d} holds out every"
          f" {m['eval_every_nth_document']}th document (fixed when it was prepared): set"
          f" data.eval_every_nth_document={m['eval_every_nth_document']}, or prepare it again")
    if m["num_files"] % num_shards:
      raise DataError(
          f"{d} has {m['num_files']} files per split, which {num_shards} data shards"
          " (data.num_shards, or one per process) do not divide: each process could not read"
          " only its own files. Use a divisor, or prepare again with --num_files=a multiple of"
          f" {num_shards}")
    if tokenizer_path:
      self._same_tokenizer(tokenizer_lib.load(tokenizer_path),
                           f"config.tokenizer.path={tokenizer_path!r}",
                           "drop the setting to use the data's, or prepare again with it")

  def _same_tokenizer(self, tok: tokenizer_lib.Tokenizer, what: str, fix: str) -> None:
    want = self.manifest["tokenizer"]["fingerprint"]
    if fingerprint(tok) != want:
      raise tokenizer_lib.TokenizerError(
          f"{what} is not the tokenizer {self.directory} was prepared with (fingerprint"
          f" {fingerprint(tok)}, the data's {want}): {fix}")

  @property
  def tokenizer_path(self) -> str:
    """Where the data's tokenizer is (a file or folder, whichever its kind)."""
    return next(paths.join(self.directory, n) for n in TOKENIZERS.values()
                if paths.exists(paths.join(self.directory, n)))

  def tokenizer_and_stats(self, tokenizer_paths: dict[str, str], stats_path: str
                          ) -> tuple[tokenizer_lib.Tokenizer, vocab_stats_lib.VocabStats]:
    """The data's tokenizer and stats, copied to the run's paths (one per tokenizer kind); a
    run that already has a tokenizer (resumed, perhaps from raw text) keeps it and its stats
    if it is the same."""
    mine = self.tokenizer_path
    tok = tokenizer_lib.load(mine)
    self._same_tokenizer(tok, mine, "the folder is damaged; prepare it again")
    existing = [p for p in tokenizer_paths.values() if paths.exists(p)]
    if existing:
      self._same_tokenizer(
          tokenizer_lib.load(existing[0]), f"{existing[0]} (this run's)",
          f"prepare the data with --config.tokenizer.path={existing[0]}, or use a new"
          " --workdir")
    else:
      tok.save(tokenizer_paths[tok.kind])
      logging.info("Tokenizer of %s (%s, %d pieces) copied to %s", self.directory,
                   fingerprint(tok), tok.vocab_size, tokenizer_paths[tok.kind])
    if not paths.exists(stats_path):
      vocab_stats_lib.save(vocab_stats_lib.load(paths.join(self.directory, STATS)),
                           stats_path)
    # The file exists now, so nothing is counted (no documents are needed).
    return tok, vocab_stats_lib.get_vocab_stats(tok, (), stats_path, 0)


def write_manifest(directory: str, *, source: str, tok: tokenizer_lib.Tokenizer,
                   eval_every_nth_document: int, max_document_chars: int,
                   stats_max_documents: int, num_files: int, counts: dict,
                   nlp_pipeline: str = "") -> dict:
  """Writes DIR/manifest.json (the module docstring's fields), the last file of a preparation
  (writer.py); returns it."""
  manifest = {
      "format": FORMAT, "version": VERSION, "source": source,
      "tokenizer": {"fingerprint": fingerprint(tok), "vocab_size": tok.vocab_size},
      "eval_every_nth_document": eval_every_nth_document,
      "max_document_chars": max_document_chars, "stats_max_documents": stats_max_documents,
      "num_files": num_files, "id_dtype": id_dtype(tok.vocab_size), "splits": counts,
  }
  if nlp_pipeline:
    manifest["annotations"] = {"pipeline": nlp_pipeline, "features": list(annotation.FEATURES)}
  paths.write_atomic(paths.join(directory, MANIFEST), json.dumps(manifest, indent=2))
  return manifest


def open_source(source: str) -> Prepared:
  """`prepared:DIR` -> its folder, with a one-line error for anything that is not one."""
  directory = paths.expand(source[len(PREFIX):]).rstrip("/")
  how = f"make it with `python -m mlmjax.prepare --source=... --out={directory}`"
  path = paths.join(directory, MANIFEST)
  if directory.startswith("s3://"):
    raise DataError(f"config.data.source={source!r}: array_record reads prepared files from"
                    " local (or mounted) folders and gs:// only; copy it to one of those")
  if not paths.isdir(directory):
    raise DataError(f"config.data.source={source!r}: no directory {directory!r}; {how}")
  if not paths.isfile(path):
    raise DataError(f"{directory}: no {MANIFEST}, so not prepared data (or preparing it did not"
                    f" finish); {how}")
  try:
    manifest = json.loads(paths.read_text(path))
  except (OSError, ValueError) as e:
    raise DataError(f"{path}: unreadable ({e}); prepare the data again") from None
  if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
    raise DataError(f"{path}: not {FORMAT} version {VERSION} data (it says"
                    f" {manifest.get('format')!r} {manifest.get('version')!r}); prepare it again"
                    " with this mlmjax")
  return Prepared(directory, manifest)
