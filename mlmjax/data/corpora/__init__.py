"""Corpora: documents as text, from wherever they live.

  sources.py     the built-in corpus, files (local or in buckets), tfds; the train/eval split
  text_files.py  text files as a random-access list of documents, indexed by one scan
  streamed.py    .gz/.zst text, parquet and datasets folders, streamed to plain files
  mixture.py     weighted mixtures of sources (per phase)
Imports nothing of data/ outside it.
"""
