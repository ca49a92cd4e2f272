"""30% masking (Wettig et al., 2023, "Should You Mask 15% in MLM?"; MosaicBERT's recipe).

Use: python -m mlmjax.main --config=configs/mosaicbert.py:base --workdir=runs/mosaicbert

Published (MosaicBERT-Base): mask rate 0.30 (80/10/10), 128-token rows, no NSP, global batch
4096, 70K steps, peak lr 5e-4 with 6% linear warmup then linear decay, decoupled AdamW betas
(0.9, 0.98), eps 1e-6, weight decay 1e-5. (MosaicBERT's ALiBi, GLU and unpadding are
architecture changes this preset does not make.)
"""

from mlmjax.configs import bert


def get_config(size: str = "base"):
  config = bert.get_config(size)
  config.data.format = "full_sentences"
  config.data.seq_len = 128
  config.train.phases = ()
  config.masking.strategy = "random"
  config.masking.mask_rate = 0.30
  config.masking.max_predictions_per_seq = 40  # 30% of 126 maskable tokens, rounded up
  config.train.steps = 70_000
  config.train.batch_size = 4096
  config.optimizer.learning_rate = 5e-4
  config.optimizer.warmup_steps = 4_200  # 6% of 70K
  config.optimizer.adam_b2 = 0.98
  config.optimizer.adam_eps = 1e-6
  # Composer's DecoupledAdamW decays by weight_decay * lr / peak_lr per step; optax's adamw by
  # lr * weight_decay. The same decay in optax terms: 1e-5 / 5e-4 = 0.02.
  config.optimizer.weight_decay = 1e-5 / 5e-4
  return config
