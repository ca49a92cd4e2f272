"""A small BERT that visibly learns the built-in corpus on a 2-core CPU in a few minutes.

Chosen by measurement on a 2-core CPU (docs/experiments.md): 128 wide with 4 heads of 32 learns
faster per second than 256 wide; short rows (64 tokens, KJV verses are ~30) and a small batch give
many updates; 1e-3 is about the highest peak a post-LN model of this size takes. 30% masking
(as in MosaicBERT and ModernBERT) doubles the training signal per step for ~5% more compute:
"heaven" reached the fill-mask top 5 for Genesis 1:1 after 3,000 steps, where 15% masking still
ranked it 7th after 7,000 (measured here).

Rotary position embeddings instead of BERT's learned table: with the learned table this model
sat at the "copy the input + predict frequent tokens" plateau for at least 3,000 steps
(accuracy on [MASK] inputs 7%, the constant baseline 6.5%); with RoPE it learns to use its
neighbours within ~200 steps (25% at step 400, 40% at step 3,000 at 15% masking; measured here).
"""

from mlmjax.configs import base


def get_config():
  config = base.get_config()
  config.tokenizer.vocab_size = 4096
  config.data.seq_len = 64
  config.masking.mask_rate = 0.3
  config.masking.max_predictions_per_seq = 20  # 30% of 62 maskable tokens, rounded up
  config.model.hidden_size = 128
  config.model.num_layers = 4
  config.model.num_heads = 4
  config.model.intermediate_size = 512
  config.model.max_position_embeddings = 128
  config.model.position_embedding_type = "rope"
  # A few epochs of a small corpus: regularisation only slows learning down here.
  config.model.dropout_rate = 0.0
  config.model.attention_dropout_rate = 0.0
  config.train.steps = 2000
  config.train.batch_size = 32
  config.optimizer.learning_rate = 1e-3
  config.optimizer.warmup_steps = 100
  config.train.log_every_steps = 100
  config.train.eval_every_steps = 500
  config.train.eval_batches = 20
  config.train.checkpoint_every_steps = 500
  return config
