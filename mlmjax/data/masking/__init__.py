"""Host-side masking for MLM, vectorised numpy over whole batches; a mask is a pure function of
(seed, step, global example) or, for static masks, of (seed, sequence, epoch % dupe_factor).

  uniforms.py    counter-based random numbers (every draw is a hash of its coordinates)
  units.py       the per-row budget, words and whole-unit selection under it
  spans.py       SpanBERT spans;  entities.py  gazetteer and capitalised-run entities
  syntax.py      units and weights from spaCy's annotations (syntax), recognised entities
  cooccurrence.py  word n-gram and pair statistics (semantic: PMI-Masking, contextual:
                 InforMask)
  pmi_vocabulary.py  PMI-Masking's n-grams: PMI_n > 0, per-length shares, sized by coverage
  strategies.py  the base strategies, one selection function each, in one table
  diffusion.py   masked diffusion's per-document rates and independent masks
  masker.py      mixture, static, diffusion, the 80/10/10 replacement: what the pipeline calls
  settings.py    the masking.* keys typed and checked, the mixture spec
  rate_schedule.py  the mask rate as a function of the step (masking.mask_rate_schedule)
  display.py     what masking did to a batch, as text and JSON (python -m mlmjax.show_masks)
Imports data/text/ (word annotations, tokenizers, per-id tables).
"""

from mlmjax.data.masking.diffusion import Rates as DiffusionRates
from mlmjax.data.masking.masker import Masker
from mlmjax.data.masking.rate_schedule import RateSchedule, Segment
from mlmjax.data.masking.settings import STATIC_BASES, STRATEGIES, Settings
from mlmjax.data.masking.units import budget
