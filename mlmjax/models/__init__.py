"""The models: pure Flax NNX modules and the facts about them, with no data, mesh or run.

  settings.py     ModelSettings: config.model typed, with its rules; what the models take
  batch_schema.py the batch's keys, shapes and dtypes (made by data/, traced by compile)
  bert.py         the pretraining encoder (BERT, RoBERTa, SpanBERT heads, the modern block
                  options: pre-LN, GLU, rotary, local/global attention), its MLM and NSP heads
  layers.py       the blocks: embeddings' parts, self-attention, MLP, LayerNorm, rotary
  attention.py    attention kernels (XLA, cuDNN, TPU splash, Pallas GPU) behind one call; the
                  Pallas ones under shard_map on each device's shard
  compile_target.py  the mesh the model is built and traced for (not always this machine's)
  electra.py      ELECTRA: generator and discriminator over shared embeddings
  flops.py        model FLOPs per token and the devices' peaks (MFU)
  chip_rates.py   each chip's published rates: peak FLOP/s per dtype, HBM and link bandwidth
  special_ids.py  [PAD] [UNK] [CLS] [SEP] [MASK]: the ids every tokenizer maps onto
  sample_quality.py  generated text scored: generative perplexity, token entropy, repeats
  param_names.py  a parameter's name ('blocks/0/mlp_in/kernel') wherever one is printed or keyed
Imports nothing of mlmjax but errors.py: every other package may import it.
"""
