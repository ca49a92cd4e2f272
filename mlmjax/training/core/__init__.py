"""The pure core of training: what runs inside the jitted step, and the state it updates.

  steps.py        the pure jitted train and eval steps, and the contract of their loss
  losses.py       losses as (sum, count) pairs over the global batch
  train_state.py  the sharded {"step", "params", "opt_state"} and how it is built
  optimizer.py    AdamW / LAMB / Muon, clipping, learning-rate schedules (steps or tokens)

No file, clock or process here: a step is a function of the state and the batch.
Imports models/, parallel/ (sharding) and training/settings.py (the train.* keys it reads);
nothing of data/, of the run or of its planning.
"""
