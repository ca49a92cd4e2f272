"""ModernBERT (Warner et al., 2024) recipe: the modern encoder block, 30% masking, WSD.

Use: python -m mlmjax.main --config=configs/modernbert.py:base --workdir=runs/modernbert

Published architecture (both sizes): pre-LayerNorm with a final norm and no norm in the first
block, GeGLU MLP, no biases in linear layers or norms (except the decoder's), rotary positions,
sliding-window attention of 128 tokens in two of every three layers (layers 0, 3, 6, ... global)
with rotary bases 160k (global) and 10k (local), decoder tied to the embeddings, no dropout,
LayerNorm eps 1e-5, a 50,368-token vocabulary. base: 22 layers, 768 wide, 12 heads, GLU
expansion 2 x 1152; large: 28 layers, 1024 wide, 16 heads, 2 x 2624.
Published training: 30% masking, StableAdamW (betas 0.9/0.98, eps 1e-6, decoupled weight decay
1e-5, update clipping), lr 8e-4 (base) / 5e-4 (large) after a 3B-token (2B for large)
warmup, a warmup-stable-decay schedule with 1 - sqrt decay, batches of 4,608 rows of 1,024
tokens, 1.7T tokens, then a context extension to 8,192 tokens.
Here: 1,024-token rows (max_position_embeddings 8,192 for the extension); the decay runs over
the last 10% of steps (the paper decays during its context extension, a separate run here);
sentencepiece instead of ModernBERT's modified OLMo BPE tokenizer.
"""

from mlmjax.configs import base

# name: (layers, hidden size, heads, gated MLP width, peak lr, warmup tokens)
SIZES = {
    "base": (22, 768, 12, 1152, 8e-4, 3e9),
    "large": (28, 1024, 16, 2624, 5e-4, 2e9),
}
BATCH, SEQ_LEN, TOKENS = 4608, 1024, 1.7e12


def get_config(size: str = "base"):
  if size not in SIZES:
    raise ValueError(f"unknown ModernBERT size {size!r}; choose one of {', '.join(SIZES)}")
  layers, hidden, heads, mlp, lr, warmup_tokens = SIZES[size]
  config = base.get_config()
  config.model.update(
      num_layers=layers, hidden_size=hidden, num_heads=heads, intermediate_size=mlp,
      norm_position="pre", mlp="geglu", use_bias=False, position_embedding_type="rope",
      local_attention_window=128, global_attention_every=3, rope_base=160_000.0,
      local_rope_base=10_000.0, max_position_embeddings=8192, dropout_rate=0.0,
      attention_dropout_rate=0.0, layer_norm_eps=1e-5, scan_layers=True)
  config.tokenizer.vocab_size = 50368
  config.data.format = "full_sentences"
  config.data.seq_len = SEQ_LEN
  config.masking.strategy = "random"
  config.masking.mask_rate = 0.30
  config.masking.max_predictions_per_seq = 307  # 30% of 1,022 maskable tokens, rounded
  config.train.batch_size = BATCH
  config.train.steps = int(TOKENS / (BATCH * SEQ_LEN))
  config.optimizer.warmup_steps = int(warmup_tokens / (BATCH * SEQ_LEN))
  config.optimizer.learning_rate = lr
  config.optimizer.schedule = "wsd"
  config.optimizer.decay_shape = "sqrt"
  config.optimizer.decay_fraction = 0.1
  config.optimizer.adam_b1, config.optimizer.adam_b2, config.optimizer.adam_eps = 0.9, 0.98, 1e-6
  # Decoupled weight decay of 1e-5 per step at the peak (Composer's convention) in optax's
  # terms, where decay is multiplied by the learning rate: 1e-5 / lr.
  config.optimizer.weight_decay = 1e-5 / lr
  config.optimizer.update_clip_rms = 1.0
  return config
