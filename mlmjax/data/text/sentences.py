"""A rule-based English sentence splitter (the sentence-level input formats need one).

Line breaks are not sentence boundaries: a document's lines are joined with spaces first, so a
sentence wrapped over several lines (or a verse that continues on the next line) stays whole.
A blank line (paragraph break) always ends a sentence.

A sentence ends after one or more of `. ! ?` (optionally followed by closing quotes or
brackets) when whitespace follows and the next text starts like a sentence: an uppercase
letter, a digit, or an opening quote/bracket. It does NOT end after
  - a known abbreviation (`Mr.`, `Dr.`, `St.`, `e.g.`, `etc.`, month names, ... see
    `_ABBREVIATIONS`), or a single capital letter (`J. R. R. Tolkien`);
  - `.`, `!`, `?` followed by a lowercase word ("he said... and then"), or with no space after
    it (`3.14`, `example.com`).
Known misses: a sentence that really ends with an abbreviation ("... in the U.S. Then") stays
joined to the next one; sentences starting in lowercase, or ending with `:` / `;` (as many KJV
verses do), are not split; a colon introducing a quotation never splits.
"""

from __future__ import annotations

import re

_ABBREVIATIONS = frozenset("""
mr mrs ms dr prof sr jr st mt ft vs etc eg ie cf al inc ltd co corp no nos vol fig figs
gen col lt sgt capt gov rev hon jan feb mar apr jun jul aug sep sept oct nov dec approx dept
est univ ave blvd rd
""".split())

# `.`/`!`/`?` run, optional closers, whitespace, then something that can start a sentence.
_BOUNDARY = re.compile(r"""([.!?]+["'\u2019\u201d)\]]*)\s+(?=["'\u2018\u201c(\[]?[A-Z0-9])""")
_WORD_BEFORE = re.compile(r"([A-Za-z.]+)$")


def _is_abbreviation(text_before: str) -> bool:
  """True if the word right before a '.' is an abbreviation or a single-letter initial."""
  m = _WORD_BEFORE.search(text_before)
  if not m:
    return False
  word = m.group(1)
  if len(word) == 1 and word.isupper():  # an initial: "J."
    return True
  return word.replace(".", "").lower() in _ABBREVIATIONS


def split_sentences(text: str) -> list[str]:
  """Document text -> its sentences, stripped, none empty, in order."""
  out: list[str] = []
  for paragraph in re.split(r"\n\s*\n", text):
    paragraph = " ".join(paragraph.split())  # line breaks and runs of spaces -> one space
    start = 0
    for m in _BOUNDARY.finditer(paragraph):
      end = m.end(1)
      if m.group(1).startswith(".") and len(m.group(1).rstrip("\"'\u2019\u201d)]")) == 1 and (
          _is_abbreviation(paragraph[start:m.start(1)])):
        continue
      out.append(paragraph[start:end])
      start = m.end()
    if paragraph[start:].strip():
      out.append(paragraph[start:].strip())
  return [s for s in out if s]
