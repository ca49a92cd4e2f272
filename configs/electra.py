"""ELECTRA (Clark et al., 2020) recipe: replaced-token detection with a jointly trained
generator.

Use: python -m mlmjax.main --config=configs/electra.py:small --workdir=runs/electra

Published (Table 6 of the paper): discriminator small 12 layers x 256 wide, 4 heads, MLP 1024,
embeddings 128 wide; base 12 x 768, 12 heads, MLP 3072, embeddings 768. Generator: the same
depth at 1/4 (small) or 1/3 (base) of the width, heads and MLP; embeddings shared. 15% of
tokens masked, 85% of them shown as [MASK] and 15% unchanged (no random tokens); the
discriminator's loss weighted 50; AdamW (eps 1e-6, weight decay 0.01, betas 0.9/0.999), 10k
warmup steps then linear decay; dropout 0.1; small: batch 128, lr 5e-4, 128-token rows, 1M
steps; base: batch 256, lr 2e-4, 512-token rows, 766K steps. No NSP.
"""

from mlmjax.configs import base

# name: (layers, hidden, heads, mlp, embedding width, generator fraction, lr, batch, seq, steps)
SIZES = {
    "small": (12, 256, 4, 1024, 128, 1 / 4, 5e-4, 128, 128, 1_000_000),
    "base": (12, 768, 12, 3072, 768, 1 / 3, 2e-4, 256, 512, 766_000),
}


def get_config(size: str = "small"):
  if size not in SIZES:
    raise ValueError(f"unknown ELECTRA size {size!r}; choose one of {', '.join(SIZES)}")
  layers, hidden, heads, mlp, width, fraction, lr, batch, seq_len, steps = SIZES[size]
  config = base.get_config()
  config.objective.kind = "electra"
  config.objective.generator_fraction = fraction
  config.objective.discriminator_weight = 50.0
  config.model.update(num_layers=layers, hidden_size=hidden, num_heads=heads,
                      intermediate_size=mlp, embedding_size=width, dropout_rate=0.1,
                      attention_dropout_rate=0.1, max_position_embeddings=512)
  config.tokenizer.vocab_size = 30522
  config.data.format = "full_sentences"
  config.data.seq_len = seq_len
  config.masking.update(strategy="random", mask_rate=0.15, mask_token_prob=0.85,
                        random_token_prob=0.0)
  config.masking.max_predictions_per_seq = 20 if seq_len == 128 else 77  # 15% of seq_len - 2
  config.train.update(batch_size=batch, steps=steps)
  config.optimizer.update(learning_rate=lr, warmup_steps=10_000, adam_b1=0.9, adam_b2=0.999,
                          adam_eps=1e-6, weight_decay=0.01)
  return config
