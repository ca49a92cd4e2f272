"""The presets: `--config=NAME[:VARIANT]` picks `NAME.py` here (mlmjax/presets.py).

This folder is also `mlmjax/configs` (a link), so the presets import as `mlmjax.configs` from a
checkout, an editable install or a wheel, and a `configs` folder where a command runs never
shadows them. A config of your own may build on one: `from mlmjax.configs import bert`.

  base.py        every key mlmjax reads, with its default and what it means
  tiny.py        a small BERT that learns the built-in corpus on a CPU in minutes
  bert.py        BERT (segment pairs, NSP, two phases), tiny to large
  wwm.py         BERT with whole-word masking
  mosaicbert.py  BERT with 30% masking
  roberta.py     RoBERTa (no NSP, full sentences, huge batches)
  spanbert.py    SpanBERT (span masking, span-boundary objective)
  electra.py     ELECTRA (replaced-token detection, a jointly trained generator)
  modernbert.py  ModernBERT (the modern encoder block, 30% masking, WSD)
  biphasic.py    causal LM first, then MLM
  diffusion.py   masked diffusion (MDLM, LLaDA)

Imports nothing of mlmjax but its own presets: every package may read them.
"""
