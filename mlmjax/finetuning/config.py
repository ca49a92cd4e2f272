"""Fine-tuning configuration: every key `python -m mlmjax.finetune` reads, with its default.

Override any key on the command line, e.g. `--config.optimizer.learning_rate=1e-4`. The model's
shape, tokenizer, position embeddings and parameter-sharding rules are the pretrained run's
(its config.json); the rules for these values are in mlmjax/finetuning/settings.py.
"""

import ml_collections

from mlmjax.training import saved_config


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()

  # Seed of the fine-tuning run: example order, the new head's initialisation, dropout (and,
  # with --init=random, the encoder's initialisation).
  config.seed = 0

  config.data = ml_collections.ConfigDict()
  # Tokens per example, [CLS]/[SEP] included; longer examples are truncated (a pair loses
  # tokens from its longer text first). At most the pretrained model.max_position_embeddings.
  config.data.seq_len = 128
  # Train on at most this many examples, drawn with the seed (0: all): learning curves, and
  # quick runs on large tasks.
  config.data.max_train_examples = 0

  config.model = ml_collections.ConfigDict()
  # Dropout in the encoder and before the classifier (BERT fine-tunes with 0.1 everywhere),
  # and on attention probabilities.
  config.model.dropout_rate = 0.1
  config.model.attention_dropout_rate = 0.1
  # What a sequence-level head reads (classification, multiple choice, embeddings): 'cls'
  # (BERT: the [CLS] token's final state), 'mean' (the average over the example's tokens), or
  # 'auto': 'mean' for sentence embeddings (sentence-transformers' default), 'cls' elsewhere.
  config.model.pooling = "auto"

  config.train = ml_collections.ConfigDict()
  # Passes over the training set (BERT: 2-4); the steps are epochs x examples / batch_size.
  config.train.epochs = 3.0
  # Global batch size in examples; divisible by the data-parallel size of the mesh.
  config.train.batch_size = 32
  # A step whose loss or gradients are NaN/Inf changes nothing (the update is skipped). 'skip'
  # goes on, but stops after more than max_consecutive_skips in a row; 'stop' ends the run at
  # once with a message naming the step (as in pretraining).
  config.train.nonfinite_policy = "skip"
  config.train.max_consecutive_skips = 20
  # Progress line + metrics.jsonl every this many steps; the dev set is scored after every
  # epoch and at the end.
  config.train.log_every_steps = 50
  # Checkpoint every this many steps (and at the end); keep the newest max_checkpoints_to_keep.
  config.train.checkpoint_every_steps = 1000
  config.train.max_checkpoints_to_keep = 1
  # Compiled programs kept on disk, so a resumed run (or the next task on the same encoder
  # and shapes) loads its steps instead of compiling them: '' = the cache the process already
  # has (JAX_COMPILATION_CACHE_DIR), else OUTPUT/compile_cache; a folder; 'off'. As
  # pretraining's train.compilation_cache (mlmjax/training/run/compile_cache.py).
  config.train.compilation_cache = ""

  # The optimizer: pretraining's section (every key and its meaning: configs/base.py), with
  # BERT's fine-tuning defaults.
  config.optimizer = saved_config.defaults().optimizer
  # 'adamw' or 'lamb', and the peak learning rate (BERT-base: 2e-5 to 5e-5; small models take
  # more).
  config.optimizer.kind = "adamw"
  config.optimizer.learning_rate = 1e-4
  # A linear warmup over this share of the steps, then linear decay to 0.
  config.optimizer.warmup_steps = 0
  config.optimizer.warmup_fraction = 0.1
  config.optimizer.end_learning_rate = 0.0
  config.optimizer.schedule = "linear"

  # Extractive question answering (SQuAD; question_answering.py), as BERT's run_squad.
  config.qa = ml_collections.ConfigDict()
  # Question tokens kept (the rest is cut); the context gets the rest of the row.
  config.qa.max_query_length = 64
  # A context longer than its row is read in windows starting this many tokens apart.
  config.qa.doc_stride = 128
  # The longest answer decoded, in tokens, and how many best start / end tokens are paired.
  config.qa.max_answer_length = 30
  config.qa.n_best_size = 20

  # Sentence embeddings (embeddings.py): the contrastive loss's temperature (cosine
  # similarities are divided by it; sentence-transformers' default scale 20 is 0.05).
  config.embedding = ml_collections.ConfigDict()
  config.embedding.temperature = 0.05

  config.mesh = ml_collections.ConfigDict()
  # Device mesh shape over ('data', 'fsdp', 'tensor'), as for pretraining (-1: the remaining
  # devices); the parameters are sharded by the pretrained run's mesh.rules.
  config.mesh.shape = (-1, 1, 1)
  return config
