"""RoBERTa (Liu et al., 2019) recipe: no NSP, FULL-SENTENCES, dynamic masking, huge batches.

Use: python -m mlmjax.main --config=configs/roberta.py:base --workdir=runs/roberta-base
(an 8K batch needs many devices, or --config.train.grad_accum_steps=K to run it as K
micro-batches inside each step).

Published hyperparameters (paper Table 9): batch 8K sequences of 512 tokens, 500K steps, peak
lr 6e-4 (base) / 4e-4 (large), warmup 24K / 30K steps then linear decay, Adam betas
(0.9, 0.98), eps 1e-6, weight decay 0.01, dropout 0.1, 15% masking (80/10/10), a 50K
byte-level BPE vocabulary (a 50,265-piece sentencepiece BPE here).
"""

from mlmjax.configs import base

# name: (layers, hidden size, attention heads, peak lr, warmup steps)
SIZES = {
    "base": (12, 768, 12, 6e-4, 24_000),
    "large": (24, 1024, 16, 4e-4, 30_000),
}


def get_config(size: str = "base"):
  if size not in SIZES:
    raise ValueError(f"unknown RoBERTa size {size!r}; choose one of {', '.join(SIZES)}")
  config = base.get_config()
  layers, hidden, heads, lr, warmup = SIZES[size]
  config.model.num_layers = layers
  config.model.hidden_size = hidden
  config.model.num_heads = heads
  config.model.intermediate_size = 4 * hidden
  config.model.max_position_embeddings = 512
  config.tokenizer.vocab_size = 50265
  config.tokenizer.model_type = "bpe"

  config.data.format = "full_sentences"
  config.data.seq_len = 512
  config.masking.strategy = "random"
  config.masking.mask_rate = 0.15
  config.masking.max_predictions_per_seq = 80  # 15% of 510 maskable tokens, rounded up

  config.train.steps = 500_000
  config.train.batch_size = 8192
  config.optimizer.learning_rate = lr
  config.optimizer.warmup_steps = warmup
  config.optimizer.end_learning_rate = 0.0
  config.optimizer.adam_b1 = 0.9
  config.optimizer.adam_b2 = 0.98
  config.optimizer.adam_eps = 1e-6
  config.optimizer.weight_decay = 0.01
  return config
