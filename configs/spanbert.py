"""SpanBERT (Joshi et al., 2020) recipe: span masking, single 512-token segments, no NSP.

Use: python -m mlmjax.main --config=configs/spanbert.py:base --workdir=runs/spanbert

Published: spans of whole words with length ~ Geometric(p=0.2) clipped at 10 (mean 3.8),
15% of tokens masked (80/10/10 per span), no NSP, one contiguous segment of up to 512 tokens
per row (DOC-SENTENCES here), BERT's AdamW (lr 1e-4, warmup 10k, linear decay, eps 1e-6,
weight decay 0.01), batch 256, 2.4M steps, and the span-boundary objective (SBO: every token of
a masked span predicted from the two tokens around the span and its position in it, by a
two-layer GELU + LayerNorm MLP into the tied decoder) added to the MLM loss with weight 1.
"""

from mlmjax.configs import bert


def get_config(size: str = "base"):
  config = bert.get_config(size)
  config.data.format = "doc_sentences"
  config.data.seq_len = 512
  config.train.phases = ()
  config.masking.strategy = "span"
  config.masking.span_p = 0.2
  config.masking.span_max_words = 10
  config.masking.max_predictions_per_seq = 80
  config.objective.span_boundary_weight = 1.0
  config.train.steps = 2_400_000
  return config
