"""BERT (Devlin et al., 2019) recipe: segment pairs + NSP, 15% random masking, two phases.

Use: python -m mlmjax.main --config=configs/bert.py:base --workdir=runs/bert-base
Sizes: tiny, mini, small, medium (Turc et al., 2019, "Well-Read Students"), base, large.

Published hyperparameters reproduced here: AdamW lr 1e-4 (beta 0.9/0.999, eps 1e-6, weight
decay 0.01), 10k warmup steps then linear decay, batch 256, 1M steps; 90% of the steps on
128-token rows with 20 predictions, then 10% on 512 with 80; dropout 0.1; GELU; a 30k
vocabulary (WordPiece in BERT, sentencepiece here).
"""

from mlmjax.configs import base

# name: (layers, hidden size, attention heads)
SIZES = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


def get_config(size: str = "base"):
  if size not in SIZES:
    raise ValueError(f"unknown BERT size {size!r}; choose one of {', '.join(SIZES)}")
  config = base.get_config()
  layers, hidden, heads = SIZES[size]
  config.model.num_layers = layers
  config.model.hidden_size = hidden
  config.model.num_heads = heads
  config.model.intermediate_size = 4 * hidden
  config.model.max_position_embeddings = 512
  config.model.dropout_rate = 0.1
  config.model.attention_dropout_rate = 0.1
  config.tokenizer.vocab_size = 30522

  config.data.format = "segment_pair"
  config.data.seq_len = 128
  config.masking.strategy = "random"
  config.masking.mask_rate = 0.15
  config.masking.max_predictions_per_seq = 20
  config.train.phases = ((0.9, 128, 20), (0.1, 512, 80))

  config.train.steps = 1_000_000
  config.train.batch_size = 256
  config.optimizer.learning_rate = 1e-4
  config.optimizer.warmup_steps = 10_000
  config.optimizer.end_learning_rate = 0.0
  config.optimizer.adam_b1 = 0.9
  config.optimizer.adam_b2 = 0.999
  config.optimizer.adam_eps = 1e-6
  config.optimizer.weight_decay = 0.01
  return config
