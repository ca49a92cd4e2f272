"""Masked diffusion (MDLM, Sahoo et al. 2024; LLaDA, Nie et al. 2025): MLM at a mask rate drawn
per document from 0 to 1, every masked token [MASK], the loss the variational bound; the encoder
then generates text by unmasking step by step (python -m mlmjax.generate).

Use: python -m mlmjax.main --config=configs/diffusion.py:tiny --workdir=runs/diffusion
Sizes: tiny (configs/tiny.py's model and steps, a few minutes on a CPU); base (BERT-base's
12 layers of 768, the size of MDLM's small model, on 512-token rows).

What the objective fixes (configs/base.py's objective.kind and masking.diffusion_* keys): the
rates t in [1e-3, 1] spread evenly over each batch (low-discrepancy, as MDLM samples them), each
token masked alone, one prediction slot per position, the loss each target's cross-entropy over
t. The model is a plain encoder: python -m mlmjax.export makes a Hugging Face model of it as of
any MLM run. base uses pre-LayerNorm and rotary positions, as LLaDA's LLaMA-style transformer
does, without dropout.
"""

from mlmjax.configs import base
from mlmjax.configs import tiny

SIZES = ("tiny", "base")


def get_config(size: str = "tiny"):
  if size not in SIZES:
    raise ValueError(f"unknown diffusion size {size!r}; choose one of {', '.join(SIZES)}")
  if size == "tiny":
    config = tiny.get_config()
  else:
    config = base.get_config()
    config.model.update(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072,
                        max_position_embeddings=512, norm_position="pre",
                        position_embedding_type="rope", dropout_rate=0.0,
                        attention_dropout_rate=0.0)
    config.data.seq_len = 512
    config.train.update(batch_size=256, steps=200_000)
    config.optimizer.update(learning_rate=4e-4, warmup_steps=2_000)
  config.objective.kind = "diffusion"
  config.masking.strategy = "random"
  return config
