"""What masking did to a batch, as text a person reads and JSON a script reads
(`python -m mlmjax.show_masks`).

A row is shown as the text of its sequences (" | " between packed sequences), each masked run
(adjacent masked pieces: a word, a span, an entity, ...) as {text=KIND}, KIND the replacement
the model sees: [MASK], random ("random:the" with the random piece) or kept. Its JSON line lists
the runs. The summary counts, over the whole batch, the masked fraction of maskable pieces, the
replacement kinds and, for named entities and noun chunks (from spaCy's annotations, when the
rows have them) and PMI-Masking's correlated n-grams (masking/cooccurrence.py): `inside_X`, the
share of masked pieces inside one, and `whole_X`, the share of those touched by the masks that
are masked whole. These tell strategies apart: random masking puts about the corpus's share of
its masks inside entities and rarely masks one whole; `entity` puts more there, always whole.
"""

from __future__ import annotations

import numpy as np

from mlmjax.data.text import annotation
from mlmjax.data.masking import cooccurrence
from mlmjax.data.masking import syntax
from mlmjax.models import special_ids

MASK, RANDOM, KEPT = "[MASK]", "random", "kept"


def selected_of(out: dict) -> np.ndarray:
  """[R, T] bool: the masked positions of a masked batch."""
  w = out["masked_weights"] > 0
  sel = np.zeros(out["input_ids"].shape, bool)
  sel[np.nonzero(w)[0], out["masked_positions"][w]] = True
  return sel


def _kind(original: int, new: int, pieces) -> str:
  if new == special_ids.MASK_ID:
    return MASK
  return KEPT if new == original else f"{RANDOM}:{pieces[new].replace(chr(0x2581), '')}"


def rows(out: dict, original: np.ndarray, pieces: list[str], count: int) -> list[dict]:
  """The first `count` rows: {"row", "text", "masked": [{"text", "replacement"}]}.
  `original`: the ids before masking; `pieces`: each id's piece, a word start marked by a
  leading U+2581 (the tokenizer's word_pieces())."""
  sel, seg, new = selected_of(out), out["segment_ids"], out["input_ids"]
  views = []
  for r in range(min(count, len(new))):
    text, runs, run = [], [], None
    for c in np.flatnonzero(seg[r] > 0):
      token = int(original[r, c])
      if token in (special_ids.CLS_ID, special_ids.SEP_ID):
        if token == special_ids.CLS_ID and text:
          text.append(" |")
        run = None
        continue
      piece = pieces[token].replace("\u2581", " ")
      if not sel[r, c]:
        text.append(piece)
        run = None
        continue
      kind = _kind(token, int(new[r, c]), pieces)
      if run is None:
        run = {"text": "", "kinds": []}
        runs.append(run)
        text.append(run)
      run["text"] += piece
      run["kinds"].append(kind)
    masked = []
    for run in runs:
      kinds = list(dict.fromkeys(run.pop("kinds")))
      run["text"], run["replacement"] = run["text"].strip(), "/".join(kinds)
      masked.append(run)
    shown = "".join(f" {{{t['text']}={t['replacement']}}}" if isinstance(t, dict) else t
                    for t in text)
    views.append({"row": r, "text": shown.strip(), "masked": masked})
  return views


def _unit_ids(covered: np.ndarray, begins: np.ndarray) -> np.ndarray:
  """[R, T] unit id (-1 outside): a new unit at each piece of `begins`."""
  ids = np.cumsum(begins.reshape(-1)).reshape(begins.shape) - 1
  return np.where(covered, ids, -1)


def bio_units(codes: np.ndarray, seg: np.ndarray, maskable: np.ndarray) -> np.ndarray:
  """[R, T] unit id (-1 outside) of the spans of BIO codes (syntax.bio_spans)."""
  covered, linked = syntax.bio_spans(codes, seg, maskable)
  return _unit_ids(covered, covered & ~linked)


def summary(out: dict, original: np.ndarray, annotations: np.ndarray | None,
            ngram_units: np.ndarray | None) -> dict:
  """Counts over the whole batch (module docstring): `ngram_units` the [R, T] unit ids of the
  correlated n-grams (ngram_unit_ids); a share is None where its source is missing."""
  sel = selected_of(out)
  maskable = (original >= special_ids.NUM_SPECIAL) & (out["segment_ids"] > 0)
  new = out["input_ids"]
  n = int(sel.sum())
  kinds = {MASK: int((sel & (new == special_ids.MASK_ID)).sum()),
           KEPT: int((sel & (new == original)).sum())}
  kinds[RANDOM] = n - kinds[MASK] - kinds[KEPT]
  result = {"summary": True, "rows": int(len(new)), "masked": n,
            "masked_fraction": round(n / max(int(maskable.sum()), 1), 4), "replacement": kinds}
  units = {"ngrams": ngram_units}
  for name, feature in (("entities", annotation.ENTITY), ("noun_chunks", annotation.CHUNK)):
    units[name] = (None if annotations is None
                   else bio_units(annotations[..., feature], out["segment_ids"], maskable))
  for name in ("entities", "noun_chunks", "ngrams"):
    unit = units[name]
    if unit is None:
      result[f"inside_{name}"] = result[f"whole_{name}"] = None
      continue
    inside = unit >= 0
    result[f"inside_{name}"] = round(float((sel & inside).sum()) / max(n, 1), 4)
    size = np.bincount(unit[inside], minlength=1)
    hit = np.bincount(unit[inside & sel], minlength=len(size))
    touched = hit > 0
    result[f"whole_{name}"] = round(float((hit[touched] == size[touched]).sum())
                                    / max(int(touched.sum()), 1), 4)
  return result


def ngram_unit_ids(original, seg, stats, table: cooccurrence.Cooccurrence) -> np.ndarray:
  """[R, T] unit id (-1 outside) of each occurrence of the table's correlated n-grams, as
  `semantic` finds them."""
  maskable = (original >= special_ids.NUM_SPECIAL) & (seg > 0)
  starts, hashes = cooccurrence.word_hashes(original, seg, maskable, stats)
  heads, inside = cooccurrence.ngram_units(starts, hashes, seg, maskable, table)
  return _unit_ids(inside, heads & inside)
