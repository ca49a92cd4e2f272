"""Fine-tuning a pretrained encoder on downstream tasks: sequence classification and regression
(GLUE), token classification (NER), extractive QA (SQuAD), multiple choice (RACE, SWAG) and
sentence embeddings (retrieval).

  tasks.py                 the task table (GLUE, SQuAD, RACE, the offline KJV tasks, your own
                           files) and loading; make_kind
  records.py               what one example of each kind is
  kind.py                  the interface every kind implements (encode, model, objective,
                           score): the trainer knows nothing else of a task
  classification.py        sequence classification / regression: BERT's pooler + classifier
  token_classification.py  a tag per word at its first piece
  question_answering.py    windows over long contexts, start/end heads, answer decoding
  multiple_choice.py       one score per option, softmax over options
  embeddings.py            mean-pooled embeddings, in-batch negatives, retrieval metrics
  examples.py, squad.py, conll.py, choices.py, pairs.py   readers (tfds, CSV/TSV/JSONL,
                           SQuAD JSON, CoNLL, Parquet)
  kjv_tasks.py             offline tasks made from the built-in corpus, one or more per kind
  glue_metrics.py, squad_metrics.py, entity_metrics.py   GLUE's, the official SQuAD EM/F1,
                           seqeval's entity-level P/R/F1
  trainer.py               finetune(...): the run, on pretraining's mesh, optimizer, train step,
                           step loop and checkpoints (training/)
  finished.py              a fine-tuned run loaded back (export, embed)
  config.py, settings.py   the fine-tuning config keys, typed
The command is mlmjax/finetune.py. The top of the library:
Imports training/, hf/, data/, parallel/ and models/.
"""
