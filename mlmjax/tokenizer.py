"""The tokenizer from the command line: train one, or see how text is tokenized.

  python -m mlmjax.tokenizer train --output=tok.model [--source=builtin] [--vocab_size=8000]
      [--model_type=unigram|bpe] [--max_sentences=N] [--eval_every_nth_document=50]
  python -m mlmjax.tokenizer encode (--tokenizer=tok.model | --workdir=runs/x) [--pieces]
      "some text" ...                       (no text: one text per line of standard input)

`train` reads --source like config.data.source (the built-in corpus, .txt/.jsonl files or
globs, tfds:NAME) and trains on its training split, as a run does: with the same settings the
model equals the one a run would train, and `--config.tokenizer.path=tok.model` uses it.
`encode` prints one line per text: its ids, or with --pieces its pieces. The library is
mlmjax/data/text/tokenizer.py.
"""

from __future__ import annotations

from mlmjax.parallel import plugins  # first, before anything imports jax: cli.py says why
plugins.hide()
# pylint: disable=wrong-import-position,wrong-import-order

import sys

from absl import flags
from absl import logging

from mlmjax import cli
from mlmjax.data.corpora import sources
from mlmjax.data.text import tokenizer as tokenizer_lib
from mlmjax import errors
from mlmjax.training.run import workdir as workdir_lib

_OUTPUT = flags.DEFINE_string("output", None, "train: where to write the model.")
_SOURCE = flags.DEFINE_string("source", "builtin", "train: the text (as config.data.source).")
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", 8000, "train: pieces in the vocabulary.")
_MODEL_TYPE = flags.DEFINE_enum("model_type", "unigram", ["unigram", "bpe"], "train: algorithm.")
_MAX_SENTENCES = flags.DEFINE_integer("max_sentences", 2_000_000,
                                      "train: at most this many lines of text.")
_EVAL_EVERY = flags.DEFINE_integer(
    "eval_every_nth_document", 50, "train: the held-out split left out, as in a run"
    " (config.data.eval_every_nth_document).")
_TEXT_FIELD = flags.DEFINE_string(
    "text_field", "text", "train: the .jsonl field / table column with the text"
    " (config.data.text_field).")
_TOKENIZER = flags.DEFINE_string("tokenizer", None, "encode: a sentencepiece .model file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "encode: a run whose tokenizer to use.")
_PIECES = flags.DEFINE_bool("pieces", False, "encode: print pieces instead of ids.")

COMMANDS = ("train", "encode")


def train(output: str, source: str, vocab_size: int, model_type: str, max_sentences: int,
          eval_every: int, text_field: str = "text") -> tokenizer_lib.Tokenizer:
  train_split, _ = sources.load_splits(source, eval_every, text_field=text_field)
  logging.info("Training a %d-piece %s model on %d documents of %r...", vocab_size, model_type,
               len(train_split), source)
  tok = tokenizer_lib.train_tokenizer(train_split, vocab_size, model_type, max_sentences)
  try:
    tok.save(output)
  except OSError as e:
    raise errors.UserError(f"cannot write --output={output}: {e.strerror}") from None
  return tok


def encode(tok: tokenizer_lib.Tokenizer, texts: list[str], pieces: bool) -> list[str]:
  """One line per text: space-separated ids, or pieces."""
  rows = tok.encode(texts)
  if pieces:
    return [" ".join(tok.id_to_piece(i) for i in row) for row in rows]
  return [" ".join(map(str, row)) for row in rows]


def _run(argv: list[str]) -> None:
  command, texts = argv[1], argv[2:]
  if command == "train":
    if not _OUTPUT.value:
      raise errors.CommandLineError("train needs --output=PATH.model")
    if texts:
      raise errors.CommandLineError(f"train takes no arguments (got {texts[0]!r}); the text"
                                    " comes from --source")
    tok = train(_OUTPUT.value, _SOURCE.value, _VOCAB_SIZE.value, _MODEL_TYPE.value,
                _MAX_SENTENCES.value, _EVAL_EVERY.value, _TEXT_FIELD.value)
    print(f"{_OUTPUT.value}: {tok.vocab_size} pieces")
    return
  if bool(_TOKENIZER.value) == bool(_WORKDIR.value):
    raise errors.CommandLineError("encode needs --tokenizer=PATH.model or --workdir=RUN (one of"
                                  " them)")
  path = _TOKENIZER.value or workdir_lib.Workdir(_WORKDIR.value).saved_tokenizer()
  tok = tokenizer_lib.load(path)
  texts = texts or [line.rstrip("\n") for line in sys.stdin]
  for line in encode(tok, texts, _PIECES.value):
    print(line)


def main(argv):
  if len(argv) < 2 or argv[1] not in COMMANDS:
    got = f" (got {argv[1]!r})" if len(argv) > 1 else ""
    raise errors.CommandLineError(f"give an action, {' or '.join(COMMANDS)}{got}: e.g."
                                  " python -m mlmjax.tokenizer encode --workdir=runs/tiny"
                                  " \"some text\"")
  _run(argv)


if __name__ == "__main__":
  cli.run(main, arguments=True)
