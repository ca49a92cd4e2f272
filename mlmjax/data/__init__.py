"""The input: text in, masked fixed-shape batches out, all on the host. Stage by stage:

  corpora/        documents as text: files, buckets, tfds, the built-in corpus, mixtures
  text/           text to ids: tokenizers, sentences, word annotations, per-id tables
  rows/           tokenized documents into rows (RoBERTa's formats, NSP/SOP pairs, packing)
  prepared/       a corpus tokenized once into ArrayRecord files: reader, writer, Beam
  masking/        the masking strategies (a mask is a pure function of seed, step, row) and
                  the mask rate schedule
The stream, over those stages:
  shard_walk.py   one data shard walked in windows (in grain workers or not)
  pipeline.py     a process's batch iterator over its shards, masked, checkpointable (its
                  docstring lists the stages of a batch, file to step, in order)
  prefetch.py     items made ahead of the loop (batches put on the device mesh)
  run_input.py    a run's input built in one place (train, held-out, tokenizer, masker)
  settings.py     the data.* keys, typed and checked
The modules here import the stages; a stage imports only the stages its docstring names.
Imports parallel/ and models/ (special ids); never training/ or above.
"""
