"""Example construction: turn tokenized documents into fixed-length packed rows.

`full_sentences` (RoBERTa's FULL-SENTENCES, document-masked): each document is cut into
consecutive chunks of at most seq_len - 2 tokens, each chunk becomes one sequence
`[CLS] chunk [SEP]`, and sequences are first-fit packed into rows of exactly seq_len tokens.
Packing adds `segment_ids` (1, 2, ... per sequence in the row, 0 for padding), which the model
turns into a block-diagonal attention mask, and `positions` that restart at 0 per sequence,
so packed rows behave exactly like separate, unpadded examples.
"""

from __future__ import annotations

import grain
import numpy as np

from mlmjax.data import tokenizer as tokenizer_lib


class ChunkDocument(grain.experimental.FlatMapTransform):
  """token ids of one document -> `[CLS] chunk [SEP]` sequences of at most seq_len tokens."""

  # Only the MapDataset flavour of FlatMap needs a bound; ours runs on an IterDataset.
  max_fan_out = 1 << 30

  def __init__(self, seq_len: int):
    self.chunk_len = seq_len - 2

  def flat_map(self, ids: np.ndarray) -> list[dict[str, np.ndarray]]:
    out = []
    for start in range(0, len(ids), self.chunk_len):
      chunk = ids[start:start + self.chunk_len]
      seq = np.concatenate([[tokenizer_lib.CLS_ID], chunk, [tokenizer_lib.SEP_ID]])
      out.append({"input_ids": seq.astype(np.int32)})
    return out


def _rename_packed(row: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  ids = row["input_ids"]
  return {
      "input_ids": ids.astype(np.int32),
      "segment_ids": row["input_ids_segment_ids"].astype(np.int32),
      "positions": row["input_ids_positions"].astype(np.int32),
      # One segment type in full_sentences; sentence-pair formats set 0/1 here.
      "token_type_ids": np.zeros_like(ids, np.int32),
  }


def pack_full_sentences(tokenized_docs: grain.IterDataset, seq_len: int, num_bins: int,
                        seed: int) -> grain.IterDataset:
  """IterDataset of per-document id arrays -> IterDataset of packed rows (dicts of [seq_len])."""
  sequences = grain.experimental.FlatMapIterDataset(tokenized_docs, ChunkDocument(seq_len))
  packed = grain.experimental.FirstFitPackIterDataset(
      sequences, length_struct={"input_ids": seq_len}, num_packing_bins=num_bins,
      seed=seed, shuffle_bins=True)
  return packed.map(_rename_packed)
