"""Rows from units (formats.py): placing units into rows, and a whole batch of rows to arrays.

`Packer` fills `num_bins` rows at a time: with packing, each unit goes into the first row with
room for it (first fit); without, each unit gets a row of its own. A *round* ends when a unit
fits nowhere (then every row holds at least one unit) and `take()` hands its rows over; the unit
that did not fit starts the next round. Only unit lengths matter here, so placing is cheap.

`materialize` turns a list of rows (each a list of units) into the arrays the model and the
masker read, with one concatenation and a few vectorised scatters per batch (no per-row arrays):
the row arrays of models/batch_schema.py (`ROWS`), with `HOST_ONLY` if `sequence_keys` and
`PAIR_LABELS` if `pairs`, and `annotations` when the units carry word features (annotation.py).
`segment_ids` number the units of a row 1, 2, ... and `positions`
restart at 0 in each unit, so packing is invisible to the model.
"""

from __future__ import annotations

import numpy as np

from mlmjax.data.text import annotation
from mlmjax.models import batch_schema

_DTYPES = {k: dtype for k, (_, dtype) in {**batch_schema.ROWS, **batch_schema.HOST_ONLY,
                                          **batch_schema.PAIR_LABELS}.items()}


class Packer:
  """Places units (anything with a `length`) into rows of at most `seq_len` tokens."""

  def __init__(self, num_bins: int, seq_len: int, pack: bool):
    self.num_bins, self.seq_len, self.pack = num_bins, seq_len, pack
    self.rows: list[list] = []
    self._room = np.full(num_bins, seq_len, np.int64)  # free tokens per row (packing)

  def add(self, unit) -> bool:
    """Places `unit`; False (and nothing changes) when it fits in no row of this round."""
    if not self.pack:
      if len(self.rows) == self.num_bins:
        return False
      self.rows.append([unit])
      return True
    fits = self._room >= unit.length
    j = int(fits.argmax())  # rows fill in order, so the first empty row is len(self.rows)
    if not fits[j]:
      return False
    if j == len(self.rows):
      self.rows.append([unit])
    else:
      self.rows[j].append(unit)
    self._room[j] -= unit.length
    return True

  def take(self) -> list[list]:
    """The round's rows; the next round starts empty."""
    rows, self.rows = self.rows, []
    self._room[:] = self.seq_len
    return rows


def materialize(rows: list[list], seq_len: int, sequence_keys: bool = False,
                pairs: bool = False) -> dict[str, np.ndarray]:
  """[rows] of units -> the batch arrays (module docstring)."""
  units = [u for row in rows for u in row]
  unit_row = np.array([r for r, row in enumerate(rows) for _ in row], np.int64)
  unit_seg = np.array([s for row in rows for s in range(1, len(row) + 1)], np.int32)
  lengths = np.array([u.length for u in units], np.int64)
  ends = np.cumsum(lengths)
  begins = ends - lengths  # of each unit in the concatenation of all
  first = np.flatnonzero(unit_seg == 1)  # each row's first unit
  row_begin = np.zeros(len(rows), np.int64)
  row_begin[unit_row[first]] = begins[first]
  unit_of = np.repeat(np.arange(len(units)), lengths)  # of each token
  pos = np.arange(len(unit_of)) - begins[unit_of]
  # Each token's place in the flattened [rows * seq_len] batch.
  flat = (unit_row * seq_len + begins - row_begin[unit_row])[unit_of] + pos

  def scatter(key, values) -> np.ndarray:
    out = np.zeros((len(rows), seq_len), _DTYPES[key])
    out.reshape(-1)[flat] = values
    return out

  pieces = [p for u in units for p in u.pieces]
  tokens = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
  batch = {
      "input_ids": scatter("input_ids", annotation.ids_of(tokens)),
      "token_type_ids": scatter("token_type_ids",
                                pos >= np.array([u.type0 for u in units])[unit_of]),
      "segment_ids": scatter("segment_ids", unit_seg[unit_of]),
      "positions": scatter("positions", pos),
  }
  if tokens.ndim == 2:  # word annotations: [rows, seq_len, F]
    batch["annotations"] = np.zeros((len(rows), seq_len, tokens.shape[1] - 1), np.int32)
    batch["annotations"].reshape(-1, tokens.shape[1] - 1)[flat] = tokens[:, 1:]
  if sequence_keys:
    batch["sequence_keys"] = scatter("sequence_keys",
                                     np.array([u.key for u in units], np.int64)[unit_of])
    batch["epochs"] = scatter("epochs", np.array([u.epoch for u in units], np.int32)[unit_of])
  if pairs:
    batch["nsp_labels"] = np.array([row[0].label if row else 0 for row in rows],
                                   _DTYPES["nsp_labels"])
  return batch
