"""Text files as a random-access list of documents, indexed by one streaming scan.

A .txt file holds documents separated by blank lines (lines that are empty or only whitespace);
a .jsonl file one JSON object per line with a string field `data.text_field` ("text"). Files
are indexed by byte offsets (28 bytes per document) and read on demand, so a corpus never has
to fit in memory. Files may be local or in a bucket (gs://, s3://: ranged reads). Compressed
text (.gz, .zst), parquet files and datasets folders (their `data.text_field` column) are
streamed once into local plain copies first (streamed.py) and then read the same way.

What happens to bad input (errors are DataError: one line, main.py exits 1):
  missing file, glob matching nothing, directory, other file type   DataError naming the path
  every file empty                                                  DataError naming the source
  an empty file among others                                        skipped, warning
  binary file (NUL bytes, or >30% of the first 8 KB not UTF-8 text) DataError naming the file
  invalid UTF-8 in text                                             replaced by U+FFFD, warning
                                                                    per file with the exact count
  empty documents (a .jsonl "text" that is empty or whitespace)     skipped, warning per file
  a document over `max_document_chars` (100k; .txt counts UTF-8     split into pieces at
    bytes), e.g. a 50 MB file without newlines or a huge record      whitespace, warning per file;
                                                                    `origins` keeps the pieces of
                                                                    a document together (split)
  bad JSON or a record without a string "text"                      DataError with file:line
A .txt file is scanned in bounded blocks, so even one enormous line costs little memory; a .jsonl
record must be parsed whole, and each piece of a split record re-parses it when read out of
order, so prefer .txt for giant texts.
"""

from __future__ import annotations

import array
import codecs
from collections.abc import Iterator
import json
import re

from absl import logging
import numpy as np

from mlmjax import paths as paths_lib
from mlmjax.data.corpora import streamed
from mlmjax.errors import DataError

_SNIFF_BYTES = 8192  # how much of each file the binary check looks at
_BINARY_FRACTION = 0.3  # legacy-encoded Latin text stays well below; binary/CJK-in-GBK above
_READ_BLOCK = 1 << 20  # .txt files are scanned in lines of at most this many bytes
_WHITESPACE = " \t\n\r\f\v"
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
FILE_TYPES = ".txt or .jsonl (also .gz or .zst compressed), .parquet, or a datasets folder"
SOURCE_FORMS = ("config.data.source takes 'builtin', a .txt/.jsonl(.gz/.zst)/.parquet file or a"
                " datasets folder, a glob such as"
                " 'corpus/*.txt', a comma-separated list of these, tfds:NAME[:SPLIT[:FEATURE]], or"
                " prepared:DIR (made by python -m mlmjax.prepare)")


def _plural(n: int, word: str) -> str:
  return f"{n:,} {word}" + ("" if n == 1 else "s")


# ---- exact counting of invalid UTF-8 -------------------------------------------------------
# Decoding with this handler gives exactly errors="replace" (one U+FFFD per invalid sequence)
# while counting the replacements; counting U+FFFD in the output would also count real ones.
_replacements = [0]  # total ever made; callers take the difference around a decode


def _replace_and_count(err: UnicodeDecodeError) -> tuple[str, int]:
  _replacements[0] += 1
  return "\ufffd", err.end


codecs.register_error("mlmjax.replace_and_count", _replace_and_count)


class _Utf8Decoder:
  """Incremental UTF-8 decoder (a character may straddle two reads) that counts replacements."""

  def __init__(self):
    self._decoder = codecs.getincrementaldecoder("utf-8")("mlmjax.replace_and_count")
    self.replaced = 0

  def decode(self, data: bytes, final: bool = False) -> str:
    before = _replacements[0]
    text = self._decoder.decode(data, final)
    self.replaced += _replacements[0] - before
    return text


def _check_not_binary(path: str, head: bytes) -> None:
  """Refuses files that are not text, judged from their first bytes (UTF-8 in any script passes)."""
  if b"\0" in head:
    raise DataError(f"{path}: looks like a binary file (it contains NUL bytes); give UTF-8 .txt"
                    " or .jsonl text")
  decoder = _Utf8Decoder()
  text = decoder.decode(head)  # not final: a character cut by the end of `head` is no error
  bad = decoder.replaced + len(_CONTROL_CHARS.findall(text))
  if head and bad / len(head) > _BINARY_FRACTION:
    raise DataError(f"{path}: looks like a binary file ({bad / len(head):.0%} of its first"
                    f" {len(head):,} bytes are not UTF-8 text); give UTF-8 .txt or .jsonl text")


# ---- cutting over-long documents -------------------------------------------------------------
def _pieces(read, start: int, end: int, max_len: int) -> Iterator[tuple[int, int]]:
  """Cuts [start, end) into pieces of at most max_len units, each ending at whitespace if it can.

  `read(pos, n)` returns n units (bytes of a file, or characters of a str) from pos.
  """
  while end - start > max_len:
    window = read(start, max_len + 1)  # one more: whitespace right after the limit is a clean cut
    spaces = _WHITESPACE.encode() if isinstance(window, bytes) else _WHITESPACE
    cut = max(window.rfind(c) for c in spaces)
    if cut > 0:
      yield start, start + cut
      start += cut + 1
    else:  # no whitespace at all: cut at the limit, on a UTF-8 character boundary
      cut = max_len
      while isinstance(window, bytes) and cut > 1 and window[cut] & 0xC0 == 0x80:
        cut -= 1
      yield start, start + cut
      start += cut
  yield start, end


# ---- local files: an index of byte ranges, documents read on demand ---------------------------
def _txt_documents(f, decoder: _Utf8Decoder) -> Iterator[tuple[int, int]]:
  """(start, end) byte ranges of the blank-line-separated documents of a .txt file."""
  offset, start, end, at_line_start = f.tell(), None, None, True
  # Bounded reads: a line longer than a block arrives in pieces, so no line is held whole.
  for line in iter(lambda: f.readline(_READ_BLOCK), b""):
    # Decoded only to count invalid UTF-8 (documents are decoded when read); an ASCII line that
    # starts a line is valid and leaves no partial character behind, so it can skip the decoder.
    if not (at_line_start and line.isascii()):
      decoder.decode(line)
    if line.strip():
      start = offset if start is None else start
      end = offset + len(line)
    elif at_line_start and start is not None:  # a blank line ends the document
      yield start, end
      start = None
    offset += len(line)
    at_line_start = line.endswith(b"\n")
  decoder.decode(b"", final=True)  # a truncated character at the very end counts too
  if start is not None:
    yield start, end


def _jsonl_records(f, path: str, decoder: _Utf8Decoder, field: str = "text"
                   ) -> Iterator[tuple[int, int, str]]:
  """(start, end, text) of each record of a .jsonl file; blank lines are not records."""
  offset = f.tell()
  for lineno, line in enumerate(iter(f.readline, b""), 1):
    text = decoder.decode(line, final=True)
    if text.strip():
      try:
        record = json.loads(text)
      except json.JSONDecodeError as e:
        raise DataError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
      if not isinstance(record, dict) or not isinstance(record.get(field), str):
        raise DataError(f'{path}:{lineno}: expected an object with a string "{field}" field'
                        " (data.text_field)" if field != "text" else
                        f'{path}:{lineno}: expected an object with a string "text" field')
      yield offset, offset + len(line), record[field]
    offset += len(line)


class _FileDocuments:
  """Documents of .txt/.jsonl files, read on demand through an index built by one scan.

  The index costs 28 bytes per document (file, start, end, document of a piece), so corpora
  larger than memory work.
  A piece of a split .jsonl record also stores its character range.
  """

  def __init__(self, paths: list[str], max_chars: int, text_field: str = "text"):
    # What is read (a local copy for compressed files and tables: streamed.py), what errors
    # name (the user's file), how (.txt or .jsonl) and a .jsonl record's text field.
    self._paths, self._names, self._kinds, self._fields = [], list(paths), [], []
    for i, path in enumerate(paths):
      if streamed.needs_copy(path):
        local, kind = streamed.readable(path, text_field, i)
        table = not path.endswith(streamed.COMPRESSED)
        field = "text" if table else text_field
      else:
        local, kind, field = path, path[path.rindex("."):], text_field
      self._paths.append(local)
      self._kinds.append(kind)
      self._fields.append(field)
    self._file, self._start, self._end = array.array("i"), array.array("q"), array.array("q")
    self._origin = array.array("q")  # the document each entry (a piece, if split) belongs to
    self._documents = 0
    self._char_range: dict[int, tuple[int, int]] = {}  # document -> piece of a .jsonl record
    self._last_record: tuple[tuple[str, int], str] | None = None  # see _record_text
    self.empty_files = 0
    for i in range(len(paths)):
      self._scan(i, max_chars)

  def _add(self, file: int, start: int, end: int, origin: int) -> None:
    self._file.append(file)
    self._start.append(start)
    self._end.append(end)
    self._origin.append(origin)

  @property
  def origins(self) -> np.ndarray | None:
    """[entries] the document of each entry, or None when no document was split."""
    if self._documents == len(self):
      return None
    return np.frombuffer(self._origin, np.int64)

  def _scan(self, file: int, max_chars: int) -> None:
    """Indexes one file's documents and warns about what it found."""
    before = len(self)
    decoder = _Utf8Decoder()
    path = self._names[file]  # what messages name; self._paths[file] is what is read
    try:
      with paths_lib.open(self._paths[file], "rb") as f:
        head = f.read(_SNIFF_BYTES)
        _check_not_binary(path, head)
        f.seek(len(codecs.BOM_UTF8) if head.startswith(codecs.BOM_UTF8) else 0)
        scan = self._scan_txt if self._kinds[file] == ".txt" else self._scan_jsonl
        empty, long, pieces = scan(file, path, f, decoder, max_chars)
    except OSError as e:  # e.g. no permission: the user's to fix, not a bug
      raise DataError(f"{path}: cannot read it ({e.strerror})") from None
    if decoder.replaced:
      logging.warning("%s: %s replaced with U+FFFD", path,
                      _plural(decoder.replaced, "invalid UTF-8 sequence"))
    if empty:
      logging.warning("%s: %s skipped", path, _plural(empty, "empty document"))
    if long:
      logging.warning("%s: %s longer than %s characters split into %s", path,
                      _plural(long, "document"), f"{max_chars:,}", _plural(pieces, "piece"))
    if len(self) == before:
      self.empty_files += 1
      logging.warning("%s: no text (empty, or only blank lines or empty documents); skipped", path)

  def _scan_txt(self, file, path, f, decoder, max_chars) -> tuple[int, int, int]:
    """Returns (empty documents, long documents, their pieces); a .txt has no empty documents."""
    long = pieces = 0
    # A second handle: cutting reads behind the scan.
    with paths_lib.open(self._paths[file], "rb") as window_f:
      def read(pos, n):
        window_f.seek(pos)
        return window_f.read(n)
      for start, end in _txt_documents(f, decoder):
        cuts = list(_pieces(read, start, end, max_chars))
        if len(cuts) > 1:
          long, pieces = long + 1, pieces + len(cuts)
        for a, b in cuts:
          self._add(file, a, b, self._documents)
        self._documents += 1
    return 0, long, pieces

  def _scan_jsonl(self, file, path, f, decoder, max_chars) -> tuple[int, int, int]:
    """Returns (empty documents, long documents, their pieces)."""
    empty = long = pieces = 0
    for start, end, text in _jsonl_records(f, path, decoder, self._fields[file]):
      if not text.strip():
        empty += 1
      elif len(text) <= max_chars:
        self._add(file, start, end, self._documents)
        self._documents += 1
      else:  # the record stays the unit of reading; each piece remembers its characters
        cuts = [(a, b) for a, b in _pieces(lambda p, n: text[p:p + n], 0, len(text), max_chars)
                if text[a:b].strip()]
        long, pieces = long + 1, pieces + len(cuts)
        for a, b in cuts:
          self._char_range[len(self)] = (a, b)
          self._add(file, start, end, self._documents)
        self._documents += 1
    return empty, long, pieces

  def __len__(self) -> int:
    return len(self._file)

  def __getitem__(self, index: int) -> str:
    file = self._file[index]
    path, start, end = self._paths[file], self._start[index], self._end[index]
    if self._kinds[file] == ".jsonl":
      text = self._record_text(path, start, end, cache=index in self._char_range,
                               field=self._fields[file])
      lo, hi = self._char_range.get(index, (0, len(text)))
      return text[lo:hi].strip()
    # Opened per read: thread-safe, picklable, no descriptor limits (in a bucket: a ranged read).
    data = paths_lib.read_range(path, start, end)
    return data.decode("utf-8", "replace").replace("\r\n", "\n").strip()

  def _record_text(self, path: str, start: int, end: int, cache: bool,
                   field: str = "text") -> str:
    # The pieces of a split record are read one after another by tokenizer training and eval;
    # keeping the last record avoids parsing a huge line once per piece there.
    if self._last_record and self._last_record[0] == (path, start):
      return self._last_record[1]
    text = json.loads(paths_lib.read_range(path, start, end).decode("utf-8", "replace"))[field]
    if not text.isascii():  # JSON can escape lone surrogates ("\ud800"), which UTF-8 cannot hold
      text = text.encode("utf-8", "replace").decode("utf-8")
    if cache:
      self._last_record = ((path, start), text)
    return text

  def __getstate__(self):  # grain workers get the index, not a cached giant record
    return {**self.__dict__, "_last_record": None}


def _expand(source: str) -> list[str]:
  """The files a comma-separated list of paths and globs names; every part must name some."""
  paths: list[str] = []
  seen: set[str] = set()
  for pattern in source.split(","):
    pattern = paths_lib.expand(pattern.strip())
    folder = False  # a datasets folder
    if paths_lib.has_magic(pattern):
      matches = paths_lib.glob(pattern)
      if not matches:
        raise DataError(f"{pattern}: no files match; {SOURCE_FORMS}")
    elif paths_lib.isdir(pattern):
      if streamed.is_datasets_dict(pattern):
        raise DataError(f"{pattern}: a datasets DatasetDict; name one of its splits, e.g."
                        f" '{pattern}/train'")
      if not streamed.is_datasets_folder(pattern):
        raise DataError(f"{pattern}: is a directory; give a glob such as '{pattern}/*.txt'")
      matches, folder = [pattern], True
    elif not paths_lib.isfile(pattern):
      raise DataError(f"{pattern}: no such file; {SOURCE_FORMS}")
    else:
      matches = [pattern]
    for path in matches:
      if not (path.endswith(streamed.SUFFIXES) or folder):
        raise DataError(f"{path}: unsupported file type; use {FILE_TYPES}")
      if path not in seen:  # a file named twice would leak into both splits
        seen.add(path)
        paths.append(path)
  return paths


def file_documents(source: str, max_chars: int, text_field: str = "text") -> _FileDocuments:
  """The documents of `config.data.source` files (module docstring)."""
  paths = _expand(source)
  docs = _FileDocuments(paths, max_chars, text_field)
  if docs.empty_files == len(paths):
    where = paths[0] if len(paths) == 1 else f"config.data.source={source!r}"
    raise DataError(f"{where}: no text in {_plural(len(paths), 'file')} (empty, or only blank"
                    ' lines or empty documents); give .txt documents separated by blank lines'
                    ' or .jsonl lines with a "text" field')
  return docs
