"""A small BERT that visibly learns the built-in corpus on a 2-core CPU in a few minutes."""

from configs import base


def get_config():
  config = base.get_config()
  config.tokenizer.vocab_size = 4096
  config.model.hidden_size = 256
  config.model.num_layers = 4
  config.model.num_heads = 4
  config.model.intermediate_size = 1024
  config.model.max_position_embeddings = 128
  # Less than one epoch of data: regularisation only slows learning down here.
  config.model.dropout_rate = 0.0
  config.model.attention_dropout_rate = 0.0
  config.train.steps = 2000
  config.train.batch_size = 32
  # Small models tolerate (and need) a much higher peak learning rate than BERT-base.
  config.train.learning_rate = 1e-3
  config.train.warmup_steps = 200
  config.train.log_every_steps = 50
  config.train.eval_every_steps = 500
  config.train.eval_batches = 6
  config.train.checkpoint_every_steps = 500
  return config
