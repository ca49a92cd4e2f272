"""The pure core of training: what runs inside the jitted step, and the state it updates.

  steps.py        the pure jitted train and eval steps, and the contract of their loss
  losses.py       losses as (sum, count) pairs over the global batch
  train_state.py  the sharded {"step", "params", "opt_state"} and how it is built
  optimizer.py    AdamW / LAMB / Muon, clipping, learning-rate schedules (steps or tokens),
                  and the optimizer.* section

No file, clock or process here: a step is a function of the state and the batch, and each
function takes the values it reads (optimizer.py's section, OptimizerSettings, is its own).
Imports models/ and parallel/ (sharding); nothing else of training, nothing of data/.
"""
