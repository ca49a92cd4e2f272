"""The Hugging Face bridge: models leave mlmjax as transformers checkpoints and enter from them.

  rules.py     the name mapping, one rule per parameter, for BERT, RoFormer, ModernBERT, ELECTRA
  convert.py   parameters to and from transformers' state dicts, architecture settings
  exporter.py  a finished run written as a transformers model + fast tokenizer, and verified
  importer.py  `init_from=hf:FOLDER`: a run's architecture, tokenizer and first state from one
  heads.py     a fine-tuned model as the matching transformers class (sequence, token, QA,
               multiple-choice heads; sentence-transformers), verified
Imports data/ (tokenizers, formats), parallel/ and models/; training/ and finetuning/ hand it
their runs.
"""
