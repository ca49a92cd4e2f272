"""Training: the pretraining run top-down and the parts every run (fine-tuning too) shares.

  train.py             train_and_evaluate(config, workdir): the pretraining run
  assembly.py          a run's parts made from its settings in one place: input, model and
                       optimizer on a mesh, train step, batch shapes, FLOPs
  run_settings.py      RunSettings: every section of a run's config, typed
  settings.py          the objective.*, train.*, eval.* and watchdog.* sections
  phases.py            phases: length (BERT's 128 then 512), batch, rotary base, mask rate;
                       parsed once into a Plan
  loop.py              the step loop: order of things, preemption, the non-finite policy
  train_state.py       the sharded {"step", "params", "opt_state"} and how it is built
  steps.py             the pure jitted train and eval steps, and the contract of their loss
  losses.py            losses as (sum, count) pairs over the global batch
  objectives/          the pretraining objectives, registered by name: MLM (NSP/SOP, span
                       boundary), ELECTRA, CLM, diffusion
  optimizer.py         AdamW / LAMB / Muon, clipping, learning-rate schedules (steps or tokens)
  time_budget.py       train.budget_hours: the schedule follows the time spent
  masking_feedback.py  adaptive masking: per-token losses fed back to the masker
  checkpoint.py        orbax checkpoints of the state, the data position and host state
  workdir.py           the run folder's paths; workdir_lock.py: one trainer per folder
  saved_config.py      a run's config.json read back onto today's defaults
  finished_run.py      a run loaded back from its folder (predict, evaluate, export, finetune)
  metrics.py           metric files, progress lines, tokens/s and MFU
  goodput.py           where a run's hours went, across restarts (each process's clock)
  watchdog.py          a process that makes no progress: stacks, one line, exit 75
  startup_watch.py     jax's distributed start: a peer that never joins, named
  stragglers.py        the process the others wait for, named at each log interval
  learning_curves.py   the curves.png of a run
  config_check.py      every config rule, checked before anything is written
  fit.py               train.fit='auto': micro-batches and remat chosen by real compiles
  step_time.py         a compiled step's predicted time on its chip (the compile report, fit)
  compile_cache.py     jax's persistent compilation cache (train.compilation_cache)
  benchmark.py         what the bench commands measure
  masks_preview.py     the masks of a run's first batch (python -m mlmjax.show_masks)
  aot.py               the steps compiled for a target without its devices (mlmjax.compile)
  profiling.py         train.profile_steps: a jax.profiler trace of chosen steps
The jitted core (steps.py, train_state.py, losses.py, optimizer.py, settings.py) loads nothing
of data/: assembly.py joins it to the input.
Imports hf/, data/, parallel/, models/ and configs/ (saved_config.py reads a run onto
configs/base.py); finetuning/ and the commands build on it.
"""
