"""The input: text in, masked fixed-shape batches out, all on the host.

  sources.py, text_files.py  documents from the built-in corpus, files (local or in buckets), tfds
  streamed.py                .gz/.zst text, parquet and datasets folders, streamed to plain files
  mixture.py                 weighted mixtures of sources (per phase)
  prepared.py                ArrayRecord data tokenized once: the format and its manifest
  preparation.py             making it: workers, resuming, hosts (python -m mlmjax.prepare)
  preparation_beam.py        the same work as an Apache Beam pipeline (Dataflow, Flink, Spark)
  tokenizer.py               sentencepiece (trained or loaded); hf_tokenizer.py: Hugging Face's
  vocab_stats.py             per-id tables the masking strategies read
  sentences.py, documents.py sentence splitting; tokenized documents
  formats.py, rows.py        units of a row (RoBERTa's formats, NSP/SOP pairs); packing to arrays
  masking/                   the masking strategies (a mask is a pure function of seed, step,
                             row) and the mask rate schedule
  shard_walk.py              one data shard walked in windows (in grain workers or not)
  pipeline.py                a process's batch iterator over its shards, masked, checkpointable
                             (its docstring lists the stages of a batch, file to step, in order)
  prefetch.py                items made ahead of the loop (batches put on the device mesh)
  run_input.py               a run's input built in one place (train, held-out, tokenizer, masker)
  settings.py                the data.* and tokenizer.* keys, typed and checked
Imports parallel/ and models/ (special ids), never training/ or above.
"""
