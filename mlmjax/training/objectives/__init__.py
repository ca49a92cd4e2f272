"""Pretraining objectives as registered parts: `objective.kind=NAME` (and a train.phases entry's
{"objective": NAME}) names one, and the run asks it for everything that differs by objective.

  base.py       the interface (Objective) and the registry (register, get, names)
  mlm.py        masked LM, with BERT's NSP/SOP head and SpanBERT's span-boundary head
  electra.py    ELECTRA's replaced-token detection, with its generator
  clm.py        next-token prediction on the encoder (a phase's 'clm')
  diffusion.py  masked diffusion: MLM at a mask rate drawn per document, and its bound

An objective of your own is a subclass registered from your own module, which the run's
`user_dir` key names (mlmjax/user_code.py; docs/training.md#an-objective-of-your-own):

    from mlmjax.training import objectives

    @objectives.register
    class Mine(objectives.MaskedLM):
      name = "mine"
      ...

Imports models/ and training/ (the jitted core: steps.py's step contract, losses.py's sums,
settings.py); nothing of data/: what the host masker makes is a tag (`masker`).
"""

from mlmjax.training.objectives.base import DIFFUSION_MASKER
from mlmjax.training.objectives.base import for_phase
from mlmjax.training.objectives.base import get
from mlmjax.training.objectives.base import MLM_MASKER
from mlmjax.training.objectives.base import names
from mlmjax.training.objectives.base import Objective
from mlmjax.training.objectives.base import register
from mlmjax.training.objectives.clm import CausalLM
from mlmjax.training.objectives.diffusion import Diffusion
from mlmjax.training.objectives.electra import Electra
from mlmjax.training.objectives.mlm import MaskedLM
