"""Training: the pretraining run top-down and the parts every run (fine-tuning too) shares.

  train.py             train_and_evaluate(config, workdir): the pretraining run
  loop.py              the step loop: order of things, preemption, the non-finite policy
  train_state.py       the sharded {"step", "params", "opt_state"} and how it is built
  steps.py             the pure jitted train and eval steps, and the pretraining objective
  losses.py            losses as (sum, count) pairs over the global batch
  optimizer.py         AdamW / LAMB / Muon, clipping, learning-rate schedules (steps or tokens)
  phases.py            phases: length (BERT's 128 then 512), batch, rotary base, mask rate
  masking_feedback.py  adaptive masking: per-token losses fed back to the masker
  checkpoint.py        orbax checkpoints of the state, the data position and host state
  workdir.py           the run folder's paths; workdir_lock.py: one trainer per folder
  finished_run.py      a run loaded back from its folder (predict, evaluate, export, finetune)
  metrics.py           metric files, progress lines, tokens/s and MFU
  learning_curves.py   the curves.png of a run
  config_check.py      every config rule, checked before anything is written
  benchmark.py         what the bench commands measure
  aot.py               the steps compiled for a target without its devices (mlmjax.compile)
  profiling.py         train.profile_steps: a jax.profiler trace of chosen steps
Imports hf/, data/, parallel/ and models/; finetuning/ and the commands build on it.
"""
