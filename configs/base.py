"""Base configuration: every key mlmjax reads, with its default. Presets override these.

Use: python -m mlmjax.main --config=configs/base.py --workdir=runs/x --config.train.steps=100
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()

  # Seed of everything random: data order, packing, masks, parameter init, dropout.
  config.seed = 0

  config.data = ml_collections.ConfigDict()
  # 'builtin' (King James Bible, offline), or a path / glob / comma-separated list of .txt
  # (documents separated by blank lines) and .jsonl (a "text" field per line) files.
  config.data.source = "builtin"
  # Every n-th document (offset n/2) is held out for evaluation; the rest is trained on.
  config.data.eval_every_nth_document = 50
  # Tokens per packed row, including [CLS]/[SEP] of every packed sequence.
  config.data.seq_len = 128

  config.tokenizer = ml_collections.ConfigDict()
  # A sentencepiece .model to use; empty: train one on the training split (saved in workdir).
  # A user model must have [PAD]=0 [UNK]=1 and control symbols [CLS]=2 [SEP]=3 [MASK]=4.
  config.tokenizer.path = ""
  # Size and type of a tokenizer trained by mlmjax ('unigram' or 'bpe').
  config.tokenizer.vocab_size = 8000
  config.tokenizer.model_type = "unigram"
  # At most this many lines of the training split are used to train the tokenizer.
  config.tokenizer.max_training_sentences = 2_000_000

  config.masking = ml_collections.ConfigDict()
  # Fraction of maskable (non-special) tokens chosen for prediction in each row.
  config.masking.mask_rate = 0.15
  # Of the chosen tokens: this fraction becomes [MASK], this one a random token; the rest stay.
  config.masking.mask_token_prob = 0.8
  config.masking.random_token_prob = 0.1
  # Fixed number of prediction slots per row (padded with weight 0). BERT: 20 for seq 128.
  config.masking.max_predictions_per_seq = 20

  config.model = ml_collections.ConfigDict()
  # BERT-base sizes. The vocabulary size comes from the tokenizer.
  config.model.hidden_size = 768
  config.model.num_layers = 12
  config.model.num_heads = 12
  config.model.intermediate_size = 3072
  # Largest position id the model can embed; data.seq_len must not exceed it.
  config.model.max_position_embeddings = 512
  # Number of token types (segments A/B).
  config.model.type_vocab_size = 2
  # Dropout on embeddings and block outputs, and on attention probabilities.
  config.model.dropout_rate = 0.1
  config.model.attention_dropout_rate = 0.1
  # Std of the truncated-normal initializer (BERT: 0.02).
  config.model.initializer_range = 0.02
  config.model.layer_norm_eps = 1e-12
  # Activation dtype ('float32' or 'bfloat16'); parameters and optimizer state stay float32.
  config.model.dtype = "float32"

  config.train = ml_collections.ConfigDict()
  # Total optimizer steps (a larger value on an existing workdir continues the run).
  config.train.steps = 1_000_000
  # Global batch size in rows, over all processes and devices.
  config.train.batch_size = 256
  # AdamW: peak learning rate after linear warmup, then linear decay to end_learning_rate.
  config.train.learning_rate = 1e-4
  config.train.warmup_steps = 10_000
  config.train.end_learning_rate = 0.0
  config.train.weight_decay = 0.01  # not applied to LayerNorm parameters or biases
  config.train.adam_b1 = 0.9
  config.train.adam_b2 = 0.999
  config.train.adam_eps = 1e-6
  # Gradients are clipped to this global norm.
  config.train.grad_clip_norm = 1.0
  # Progress line + metrics.jsonl/TensorBoard every this many steps.
  config.train.log_every_steps = 100
  # Held-out evaluation every this many steps (and at the end), over eval_batches batches.
  config.train.eval_every_steps = 2000
  config.train.eval_batches = 20
  # Checkpoint every this many steps (and at the end); keep the newest max_checkpoints_to_keep.
  config.train.checkpoint_every_steps = 2000
  config.train.max_checkpoints_to_keep = 3

  config.mesh = ml_collections.ConfigDict()
  # Device mesh shape over the axes ('data', 'fsdp', 'tensor'); -1 takes the remaining devices.
  # (-1, 1, 1) is pure data parallelism over every device.
  config.mesh.shape = (-1, 1, 1)
  # Logical parameter axis -> mesh axis (None: replicated). With fsdp = tensor = 1 these are
  # no-ops; raise those mesh axes to shard parameters and optimizer state.
  config.mesh.rules = (
      ("embed", "fsdp"),
      ("mlp", "tensor"),
      ("heads", "tensor"),
      ("kv", None),
      ("vocab", "tensor"),
  )
  return config
