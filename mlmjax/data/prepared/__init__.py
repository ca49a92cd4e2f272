"""Prepared data: a corpus tokenized once into ArrayRecord files (python -m mlmjax.prepare).

  reader.py   the format, its manifest, and reading it as a source of tokenized documents
  writer.py   making it: workers, resuming, hosts
  beam.py     the same work as an Apache Beam pipeline (Dataflow, Flink, Spark)
Imports data/corpora/ (the text it is made from) and data/text/ (tokenizers, annotations).
"""
