"""Rows: tokenized documents into the fixed-length rows of a batch.

  formats.py   units of a row (RoBERTa's formats, NSP/SOP pairs)
  packing.py   placing units into rows, and a batch of rows to arrays
Imports data/text/ (annotations carried along with the ids).
"""
