"""mlmjax: BERT-style masked-language-model pretraining in JAX/Flax.

Commands (`python -m mlmjax.NAME`), each a thin module of flags and one call:
  main         pretrain (or resume) a model in a workdir
  predict      fill [MASK]s with a run's model
  evaluate     held-out MLM metrics of a checkpoint, as JSON
  export       a checkpoint as a Hugging Face transformers model, verified
  finetune     fine-tune a pretrained run on GLUE, the built-in tasks or your files
  prepare      tokenize a corpus once into ArrayRecord files
  plot         training curves of one or more runs as a PNG
  tokenizer    train a tokenizer, or encode text with one
  bench        step time, tokens/s, MFU, memory and input speed, as JSON
  input_bench  the input pipeline's tokens/s alone
  compile      compile the steps for a TPU slice or GPU node from any machine: memory, FLOPs,
               collectives, kernel

The library, imports running one way (a package never imports one above it):
  finetuning/  tasks of every kind, their heads and metrics, the fine-tuning run
  training/    the pretraining run, the shared loop and steps, optimizer, checkpoints, run folder
  hf/          Hugging Face conversion rules, export, import
  data/        sources, tokenizers, formats and packing, masking/, the grain pipeline,
               prepared data
  parallel/    the device mesh, sharding rules, the multi-host runtime, compile targets
  models/      the encoder, attention kernels, ELECTRA, FLOPs, special ids, parameter names
cli.py runs every command (flags, one-line errors, --help) and presets.py resolves
--config=NAME[:VARIANT] to configs/ (installed as the package `configs`); errors.py (one-line
user errors) and paths.py (every file a run reads or writes, local or in a bucket) serve every
layer and import nothing above them.
"""

# Before anything imports jax: its CUDA plugin and libtpu only where they are used
# (parallel/plugins.py says why).
from mlmjax.parallel import plugins as _plugins  # pylint: disable=g-import-not-at-top

_plugins.hide()
