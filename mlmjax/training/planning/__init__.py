"""Planning a run before and while it trains: its phases, the shapes that fit, the steps
compiled for a target, their predicted time, and a budget of hours.

  phases.py       phases: length (BERT's 128 then 512), batch, rotary base, mask rate;
                  parsed once into a Plan
  fit.py          train.fit='auto': micro-batches and remat chosen by real compiles
  aot.py          the steps compiled for a target without its devices (mlmjax.compile)
  step_time.py    a compiled step's predicted time on its chip (the compile report, fit)
  time_budget.py  train.budget_hours: the schedule follows the time spent

Imports data/, parallel/, models/, training/core/, training/objectives/, training/settings.py,
training/run_settings.py, and, to compile a run's steps, training/assembly.py and
training/config_check.py.
"""
