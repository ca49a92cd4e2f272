"""mlmjax: BERT-style masked-language-model pretraining in JAX/Flax.

Commands (`python -m mlmjax.NAME`), each a thin module of flags and one call:
  main         pretrain (or resume) a model in a workdir
  predict      fill [MASK]s with a run's model
  generate     text from a run's model, unmasked step by step (masked diffusion)
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

The library, imports running one way (a package never imports one above it; each package's
docstring names its modules and, on its `Imports` line, what it may import:
tests/project/test_layering.py holds every module to it):
  inference/   using a finished run: fill-mask, held-out evaluation, unmasking, embeddings
  finetuning/  tasks of every kind, their heads and metrics, the fine-tuning run
  training/    the pretraining run assembled from its settings, the jitted steps, the shared
               loop, optimizer, checkpoints, run folder
  hf/          Hugging Face conversion rules, export, import
  data/        the input by stage: corpora/, text/ (to ids), rows/, prepared/, masking/, and
               the grain stream over them
  parallel/    the device mesh, sharding rules, the multi-host runtime, compile targets
  models/      the encoder, attention kernels, ELECTRA, FLOPs, special ids, parameter names
cli.py runs every command (flags, one-line errors, --help) and presets.py resolves
--config=NAME[:VARIANT] to configs/ (mlmjax/configs links to it); errors.py (one-line
user errors), paths.py (every file a run reads or writes, local or in a bucket),
typed_settings.py (a config section as frozen typed settings) and user_code.py (your own code,
--user_dir and a run's user_dir key) serve every layer and import nothing above them.

Importing mlmjax (or any of its library modules) changes nothing outside it: jax's CUDA plugin
and libtpu are hidden where they are not used (parallel/plugins.py) by whatever starts the
program, before it imports jax: each command at the top of its module (cli.py says why),
tests/conftest.py, the scripts of .ci/ and benchmarks/, the notebook. Where the CUDA plugin is
installed without a GPU, importing mlmjax loads its kernels (what `import jax` would) without the
driver notice they print, so a script importing a library module prints nothing of CUDA.
"""

from mlmjax.parallel import plugins as _plugins

_plugins.load_cuda_kernels_quietly()
