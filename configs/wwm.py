"""Whole-word-masking BERT (Google's 2019 BERT-*-WWM release): BERT's recipe, with every
piece of a selected word masked together.

Use: python -m mlmjax.main --config=configs/wwm.py:large --workdir=runs/bert-wwm
"""

from mlmjax.configs import bert


def get_config(size: str = "base"):
  config = bert.get_config(size)
  config.masking.strategy = "whole_word"
  return config
