"""Training: the pretraining run top-down and the parts every run (fine-tuning too) shares, by
story: the pure core, the run as it goes, and its planning.

  train.py             train_and_evaluate(config, workdir): the pretraining run
  assembly.py          a run's parts made from its settings in one place: input, model and
                       optimizer on a mesh, train step, batch shapes, FLOPs
  run_settings.py      RunSettings: every section of a run's config, typed
  settings.py          the objective.*, train.* (its phases typed), eval.* and watchdog.*
                       sections
  config_check.py      every config rule, checked before anything is written
  objectives/          the pretraining objectives, registered by name: MLM (NSP/SOP, span
                       boundary), ELECTRA, CLM, diffusion
  core/                the jitted step and its state: steps, losses, train state, optimizer
  run/                 the run as it goes: loop, checkpoints, run folder and its lock, metrics,
                       goodput, watchdog, profiling
  planning/            before and while it runs: phases, fit, ahead-of-time compile, predicted
                       step time, time budget
  saved_config.py      a run's config.json read back onto today's defaults
  finished_run.py      a run loaded back from its folder (predict, evaluate, export, finetune)
  benchmark.py         what the bench commands measure
  masks_preview.py     the masks of a run's first batch (python -m mlmjax.show_masks)
The jitted core (core/) loads nothing of data/: assembly.py joins it to the input.
Imports hf/, data/, parallel/, models/ and configs/ (saved_config.py reads a run onto
configs/base.py); finetuning/ and the commands build on it.
"""
