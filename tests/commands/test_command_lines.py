"""Every command answers bad input as `main` does: exactly one `error:` line naming the flag,
no traceback, exit status 2 for a command line it cannot run (1 for a failure on the way);
`--help` prints the command's usage and flags and exits 0. Each line runs as `python -m`
runs it (command_lines.py: one import of the library, a forked child per line)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

import command_lines
from conftest import REPO, user_env
from mlmjax.__main__ import COMMANDS

W = "/dev/null/run"  # nothing can be made there, whatever a line does
# Each command with the flags and arguments it needs, all present.
VALID = {
    "main": ["--config=tiny", f"--workdir={W}"],
    "predict": [f"--workdir={W}", "In the beginning [MASK] created"],
    "generate": [f"--workdir={W}"],
    "evaluate": [f"--workdir={W}"],
    "export": [f"--workdir={W}", "--out=/dev/null/hf"],
    "finetune": [f"--workdir={W}", "--task=kjv_qa"],
    "embed": [f"--model={W}", "--input=/dev/null/in.txt", "--output=/dev/null/out.npy"],
    "prepare": ["--source=builtin", "--out=/dev/null/prepared"],
    "plot": [f"--workdir={W}"],
    "tokenizer": ["encode", f"--workdir={W}"],
    "bench": ["--config=tiny"],
    "input_bench": ["--config=tiny"],
    "show_masks": ["--config=tiny"],
    "compile": ["--config=tiny", "--target=v5p-8"],
}
PRETRAINING_CONFIG = ["main", "prepare", "show_masks", "compile", "bench", "input_bench"]
REQUIRED = {  # the flag a command cannot do without: the line without it, the message's start
    "main": ("--workdir", "error: --workdir is required: "),
    "predict": ("--workdir", "error: --workdir is required: "),
    "generate": ("--workdir", "error: --workdir is required: "),
    "evaluate": ("--workdir", "error: --workdir is required: "),
    "export": ("--out", "error: --out is required: "),
    "finetune": ("--task", "error: --task is required: One of kjv_testament"),
    "embed": ("--output", "error: --output is required: "),
    "prepare": ("--source", "error: --source is required: "),
    "plot": ("--workdir", "error: --workdir is required: give at least one run"),
    "tokenizer": ("encode", "error: give an action, train or encode: "),
    "bench": ("--config", "error: --config is required: A preset (tiny, bert:base"),
    "input_bench": ("--config", "error: --config is required: "),
    "show_masks": ("--config", "error: --config is required: "),
    "compile": ("--target", "error: --target is required: What to compile for: "),
}
MISSPELLED = [  # the reviewers' misspellings, one per command, and what each should say
    ("--config.train.epoch=1", "error: --config.train.epoch: no such config key"),
    ("--config.model.poolng=mean", "error: --config.model.poolng: no such config key"),
    ("--config.tokenizer.vocab_sise=512", "error: --config.tokenizer.vocab_sise: no such config"
     " key (did you mean --config.tokenizer.vocab_size?)"),
    ("--config.masking.stratgy=span", "error: --config.masking.stratgy: no such config key (did"
     " you mean --config.masking.strategy?)"),
    ("--config.train.batchsize=8", "error: --config.train.batchsize: no such config key (did"
     " you mean --config.train.batch_size?)"),
    ("--config.train.steps=many", "error: --config.train.steps=many: invalid literal for int()"
     " with base 10: 'many'"),
]
PRESETS = ", ".join(sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "configs"))
                           if f.endswith(".py") and not f.startswith("_")))
BAD_CONFIGS = [  # --config values that cannot load, and the one line each gets
    ("--config=configs/nosuch.py", "error: --config=configs/nosuch.py: no such file, nor a preset"
     f" of that name (presets: {PRESETS})"),
    ("--config=bertt:base", f"error: --config=bertt:base: no such file, nor a preset of that name"
     f" (presets: {PRESETS})"),
    ("--config=bert:huge", "error: --config=bert:huge: unknown BERT size 'huge'; choose one of"
     " tiny, mini, small, medium, base, large"),
    ("--config=configs/roberta.py:huge", "error: --config=configs/roberta.py:huge: unknown RoBERTa"
     " size 'huge'; choose one of base, large"),
    ("--config=tiny:large", "error: --config=tiny:large: tiny takes no variant"),
    ("--config=README.md", "error: --config=README.md is not a config file: a Python file with"
     " a get_config() function"),
    ("--config=configs/__init__.py", "error: --config=configs/__init__.py is not a config file:"
     " a Python file with a get_config() function"),
]
IGNORED = ("--config=bert:tiny", "--config.data.seq_len=1024")  # the phases decide it


def _lines():
  """(id, argv, expected exit status, expected stderr line or its start)."""
  cases = []
  for name in COMMANDS:
    cmd, valid = f"mlmjax.{name}", VALID[name]
    cases.append((f"{name}-unknown-flag", [cmd, *valid, "--no_such_flag=1"], 2,
                  "error: --no_such_flag: unknown flag"))
    flag, message = REQUIRED[name]
    cases.append((f"{name}-missing-required", [cmd, *[a for a in valid if
                                                       not a.startswith(flag)]], 2, message))
  for i, name in enumerate(PRETRAINING_CONFIG):
    cmd, valid = f"mlmjax.{name}", VALID[name]
    keep = [a for a in valid if not a.startswith("--config=")]
    for j, (value, message) in enumerate(MISSPELLED):
      if j % len(PRETRAINING_CONFIG) == i or name == "main":  # main: all; the others: one
        cases.append((f"{name}-key-{j}", [cmd, *valid, value], 2, message))
    for j, (value, message) in enumerate(BAD_CONFIGS):
      cases.append((f"{name}-config-{j}", [cmd, *keep, value], 2, message))
    cases.append((f"{name}-ignored", [cmd, *keep, *IGNORED], 2,
                  "error: --config.data.seq_len would be ignored: train.phases=((0.9, 128, 20),"
                  " (0.1, 512, 80)) decides it for every phase; set --config.train.phases"
                  " instead"))
  more = [
      ("finetune-key", ["mlmjax.finetune", *VALID["finetune"], "--config.train.epoch=2"], 2,
       "error: --config.train.epoch: no such config key (did you mean"
       " --config.train.epochs?)"),
      ("finetune-enum", ["mlmjax.finetune", *VALID["finetune"], "--kind=qa"], 2,
       "error: --kind=qa: must be one of classification, regression, token_classification,"
       " question_answering, multiple_choice, embedding"),
      ("finetune-init", ["mlmjax.finetune", *VALID["finetune"], "--init=pretrainde"], 2,
       "error: --init=pretrainde: must be one of pretrained, random"),
      ("prepare-runner", ["mlmjax.prepare", *VALID["prepare"], "--runner=spark"], 2,
       "error: --runner=spark: must be one of local, beam"),
      ("evaluate-float", ["mlmjax.evaluate", *VALID["evaluate"], "--mask_rate=abc"], 2,
       "error: --mask_rate=abc: could not convert string to float: 'abc'"),
      ("embed-bound", ["mlmjax.embed", *VALID["embed"], "--batch_size=0"], 2,
       "error: --batch_size=0: 0 is not a positive integer"),
      ("tokenizer-enum", ["mlmjax.tokenizer", "train", "--output=/dev/null/t.model",
                          "--model_type=wordpiece"], 2,
       "error: --model_type=wordpiece: must be one of unigram, bpe"),
      ("tokenizer-action", ["mlmjax.tokenizer", "frobnicate"], 2,
       "error: give an action, train or encode (got 'frobnicate'): "),
      ("generate-steps", ["mlmjax.generate", *VALID["generate"], "--steps=0"], 2,
       "error: --steps=0: 0 is not a positive integer"),
      ("generate-remasking", ["mlmjax.generate", *VALID["generate"], "--remasking=entropy"], 2,
       "error: --remasking=entropy: must be one of low_confidence, random"),
      ("generate-no-run", ["mlmjax.generate", *VALID["generate"]], 1,
       f"error: {W} holds no training run (no {W}/config.json)"),
      ("predict-no-text", ["mlmjax.predict", f"--workdir={W}"], 2,
       'error: give at least one text with [MASK], e.g. "the [MASK] of God"'),
      ("main-argument", ["mlmjax.main", *VALID["main"], "extra"], 2,
       "error: unexpected argument 'extra': this command takes only flags (--help lists"
       " them)"),
      ("main-twice", ["mlmjax.main", *VALID["main"], "--config=bert:tiny"], 2,
       "error: --config is given 2 times; give it once"),
      ("main-override-alone", ["mlmjax.main", f"--workdir={W}", "--config.train.steps=3"], 2,
       "error: --config.train.steps overrides a key of --config, which is not given"),
      ("main-batch", ["mlmjax.main", *VALID["main"], "--config.train.batch_size=0"], 2,
       "error: train.batch_size=0 must be >= 1"),
      ("main-batch-negative", ["mlmjax.main", *VALID["main"], "--config.train.batch_size=-4"], 2,
       "error: train.batch_size=-4 must be >= 1"),
      ("main-objective", ["mlmjax.main", *VALID["main"], "--config.objective.kind=gpt"], 2,
       "error: objective.kind='gpt' is not one of clm, diffusion, electra, mlm (one of your own:"
       " its module in user_dir, or --user_dir=FILE)"),
      ("main-user-dir", ["mlmjax.main", *VALID["main"], "--user_dir=no/such.py"], 2,
       "error: --user_dir=no/such.py: neither a .py file nor a folder with an __init__.py"),
      ("evaluate-user-dir", ["mlmjax.evaluate", *VALID["evaluate"], "--user_dir=README.md"], 2,
       "error: --user_dir=README.md: neither a .py file nor a folder with an __init__.py"),
      ("main-value", ["mlmjax.main", *VALID["main"], "--config.masking.strategy=spam"], 2,
       "error: masking.strategy='spam' is not one of random, whole_word, span, entity,"
       " frequency, adaptive, syntax, semantic, contextual, mixture, static"),
      ("compile-target", ["mlmjax.compile", "--config=tiny", "--target=v9-8"], 2,
       "error: unknown target 'v9-8': use v4-N, v5p-N"),
      ("finetune-task", ["mlmjax.finetune", f"--workdir={W}", "--task=nosuch"], 2,
       "error: unknown --task='nosuch': use one of kjv_testament, kjv_next_verse"),
      ("export-bool", ["mlmjax.export", *VALID["export"], "--verify=maybe"], 2,
       "error: --verify=maybe: must be true or false"),
      # A failure on the way, not of the command line: status 1.
      ("predict-no-run", ["mlmjax.predict", *VALID["predict"]], 1,
       f"error: {W} holds no training run (no {W}/config.json)"),
  ]
  return cases + more


CASES = _lines()


@pytest.fixture(scope="module")
def results():
  return dict(zip([c[0] for c in CASES], command_lines.run([c[1] for c in CASES],
                                                            env=user_env())))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(case, results):
  name, _, status, message = case
  out = results[name]
  assert "Traceback" not in out.stderr, out.stderr[-3000:]
  lines = [l for l in out.stderr.splitlines() if l.strip()]
  assert len(lines) == 1, out.stderr[-3000:]
  assert lines[0].startswith(message), (lines[0], message)
  assert out.returncode == status, out


def _usage_lines(name: str) -> list[str]:
  """The usage lines of a command's docstring, as the source spells them."""
  with open(os.path.join(REPO, "mlmjax", f"{name}.py"), encoding="utf-8") as f:
    doc = ast.get_docstring(ast.parse(f.read()), clean=False)
  return [l for l in doc.splitlines() if "python -m mlmjax." in l or l.endswith("\\")]


@pytest.fixture(scope="module")
def helps():
  return dict(zip(COMMANDS, command_lines.run([[f"mlmjax.{n}", "--help"] for n in COMMANDS],
                                              env=user_env())))


@pytest.mark.parametrize("name", COMMANDS)
def test_help_prints_usage_and_flags_and_exits_zero(name, helps):
  out = helps[name]
  assert out.returncode == 0 and out.stderr == "", out
  text = out.stdout
  for line in _usage_lines(name):  # intact: a continuation backslash is not swallowed
    assert line in text.splitlines(), (line, text)
  assert "\nflags:\n" in text and "  --verbose: " in text
  assert len(text.splitlines()) < 80  # no config dumped (finetune's lives in a file it names)
  if name == "finetune":
    assert "mlmjax/finetuning/config.py" in text and "epochs:" not in text


def test_python_m_mlmjax_lists_every_command_with_what_it_does():
  """`python -m mlmjax` (no command): each command once, in one line with its docstring's first
  sentence, exit status 0; the commands these tests check are those it lists. With an argument:
  one error line, status 2."""
  out = subprocess.run([sys.executable, "-m", "mlmjax"], cwd=REPO, env=user_env(),
                       capture_output=True, text=True, timeout=60, check=True)
  rows = [line.split(maxsplit=1) for line in out.stdout.splitlines()[2:]]
  assert [name for name, _ in rows] == list(COMMANDS) == list(VALID)
  assert dict(rows)["predict"] == "Fill-mask queries against the latest checkpoint of a run"
  assert all(len(what) > 20 for _, what in rows), rows
  wrong = subprocess.run([sys.executable, "-m", "mlmjax", "main"], cwd=REPO, env=user_env(),
                         capture_output=True, text=True, timeout=60, check=False)
  assert (wrong.returncode, wrong.stderr) == (2, "error: python -m mlmjax takes no arguments"
                                              " (main): run a command as python -m"
                                              " mlmjax.COMMAND; python -m mlmjax alone lists"
                                              " them\n")
