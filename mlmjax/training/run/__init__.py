"""The run as it goes: the step loop and everything around it that touches files, clocks and
other processes.

  loop.py              the step loop: order of things, preemption, the non-finite policy
  checkpoint.py        orbax checkpoints of the state, the data position and host state
  workdir.py           the run folder's paths; workdir_lock.py: one trainer per folder
  metrics.py           metric files, progress lines, tokens/s and MFU
  goodput.py           where a run's hours went, across restarts (each process's clock)
  watchdog.py          a process that makes no progress: stacks, one line, exit 75
  startup_watch.py     jax's distributed start: a peer that never joins, named
  stragglers.py        the process the others wait for, named at each log interval
  profiling.py         train.profile_steps: a jax.profiler trace of chosen steps
  compile_cache.py     jax's persistent compilation cache (train.compilation_cache)
  masking_feedback.py  adaptive masking: per-token losses fed back to the masker
  learning_curves.py   the curves.png of a run

Imports parallel/ (the processes), models/, data/ (the masker's settings) and
training/saved_config.py (a run folder's config.json); nothing of the core or the planning.
"""
