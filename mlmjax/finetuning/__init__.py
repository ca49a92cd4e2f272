"""Fine-tuning a pretrained encoder on classification and regression tasks (GLUE's and yours).

  tasks.py         the task table (GLUE, the offline KJV tasks, your own files) and loading
  kjv_tasks.py     offline tasks made from the built-in corpus
  examples.py      examples read from tfds / CSV / TSV / JSONL, encoded into fixed-length rows
  glue_metrics.py  accuracy, F1, Matthews correlation, Pearson / Spearman
  classifier.py    the pretrained encoder + pooler + classifier (or regressor), and its loss
  trainer.py       finetune(...): the run, on pretraining's mesh, optimizer, train step, step
                   loop and checkpoints (training/)
  config.py        the fine-tuning config keys and defaults
The command is mlmjax/finetune.py. The top of the library: imports training/ and below.
"""
