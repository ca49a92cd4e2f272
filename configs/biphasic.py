"""Causal LM first, then MLM (Gisserot-Boukhlef et al., 2025, "Should We Still Pretrain Encoders
with Masked Language Modeling?", arXiv 2507.00994): ModernBERT's recipe (configs/modernbert.py,
either size) whose first quarter of the steps trains next-token prediction with causal
attention, the rest MLM at 30%, on the same encoder, head, optimizer state and WSD schedule.

Use: python -m mlmjax.main --config=configs/biphasic.py:base --workdir=runs/biphasic

The paper trained 38 models of 210M-1B parameters at fixed budgets, each split between the two
objectives (100% MLM, 75-25, 50-50, 25-75 and 100% CLM), and found the CLM-then-MLM runs above
MLM alone at equal compute. The sources read here did not name one best split; a quarter of CLM
keeps most of the budget on the objective the encoder is evaluated with (MLM at 15%, whatever
the phase: eval.mask_rate). At the tiny size on this machine, docs/experiments.md measures
the same split against MLM alone.
"""

from mlmjax.configs import modernbert

CLM_FRACTION = 0.25


def get_config(size: str = "base"):
  config = modernbert.get_config(size)
  seq_len, slots = config.data.seq_len, config.masking.max_predictions_per_seq
  config.train.phases = ((CLM_FRACTION, seq_len, slots, {"objective": "clm"}),
                         (1.0 - CLM_FRACTION, seq_len, slots))
  return config
