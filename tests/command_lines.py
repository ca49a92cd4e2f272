"""Many `python -m mlmjax.NAME ...` command lines, each run as `python -m` runs it, cheaply.

    results = command_lines.run([["mlmjax.main", "--config=tiny", "--workdir=x"], ...])

Every command imports jax and most of mlmjax before it parses its flags (about 3 s of a
2-core CPU), which a test of its command line would pay once per line. Here one process
imports mlmjax's library once, then runs each line in a child forked from it: the child runs
the command module as `__main__` with runpy (what `python -m` does) with the line as sys.argv,
from the repository root, and its exit status and output come back. The command modules
themselves are never imported by the parent, so each child defines its flags afresh.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINE_TIMEOUT_S = 60  # a line's limit by default: parsing, or failing early (one that trains: more)
# Imported once by the parent: what the commands import, but no command module; after
# plugins.hide(), as each command calls it first (mlmjax/cli.py), which keeps the GPU plugin
# from jax where there is no GPU (parallel/plugins.py).
_LIBRARY = ("mlmjax", "jax", "flax.nnx", "orbax.checkpoint", "grain", "mlmjax.cli",
            "mlmjax.training.train", "mlmjax.training.finished_run", "mlmjax.training.planning.aot",
            "mlmjax.training.benchmark", "mlmjax.training.masks_preview",
            "mlmjax.finetuning.trainer", "mlmjax.finetuning.tasks", "mlmjax.finetuning.finished",
            "mlmjax.hf.exporter", "mlmjax.hf.heads", "mlmjax.data.prepared.writer",
            "mlmjax.training.run.learning_curves", "mlmjax.parallel.targets")


@dataclasses.dataclass
class Result:
  argv: list[str]  # ["mlmjax.NAME", args...]
  returncode: int
  stdout: str
  stderr: str


def run(lines: list[list[str]], env: dict[str, str] | None = None, timeout: float = 600,
        line_timeout: float = LINE_TIMEOUT_S) -> list[Result]:
  """Runs each ["mlmjax.NAME", args...] line as `python -m mlmjax.NAME args...` would, in
  order, each within `line_timeout` seconds (more for a line that trains)."""
  proc = subprocess.run([sys.executable, os.path.abspath(__file__), str(line_timeout)],
                        input=json.dumps(lines),
                        capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout,
                        check=False)
  if proc.returncode != 0:
    raise RuntimeError(f"the command-line runner failed:\n{proc.stderr[-3000:]}")
  return [Result(**r) for r in json.loads(proc.stdout)]


def _run_forked(argv: list[str], line_timeout: float) -> dict:
  """One line in a child of this process: (exit status, stdout, stderr)."""
  with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
    pid = os.fork()
    if pid == 0:  # the child: the command, as `python -m` runs it
      os.dup2(out.fileno(), 1)
      os.dup2(err.fileno(), 2)
      code = 0
      try:
        import runpy  # pylint: disable=g-import-not-at-top
        sys.argv = [os.path.join(REPO, *argv[0].split(".")) + ".py", *argv[1:]]
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
      except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
      except BaseException:  # pylint: disable=broad-except  # a traceback, as python prints it
        import traceback  # pylint: disable=g-import-not-at-top
        traceback.print_exc()
        code = 1
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(code)  # pylint: disable=protected-access
    deadline = time.monotonic() + line_timeout
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
      if time.monotonic() > deadline:  # a line that runs on (a check that let it through)
        os.kill(pid, signal.SIGKILL)
        done = os.waitpid(pid, 0)
        err.write(f"\ntimed out after {line_timeout:g} s".encode())
        break
      time.sleep(0.01)
    status = done[1]
    out.seek(0)
    err.seek(0)
    return {"argv": argv, "returncode": os.waitstatus_to_exitcode(status),
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace")}


def _main() -> None:
  import importlib  # pylint: disable=g-import-not-at-top
  lines = json.loads(sys.stdin.read())
  from mlmjax.parallel import plugins  # pylint: disable=g-import-not-at-top
  plugins.hide()
  for name in _LIBRARY:
    importlib.import_module(name)
  results = [_run_forked(argv, float(sys.argv[1])) for argv in lines]
  sys.stdout.write(json.dumps(results))


if __name__ == "__main__":
  sys.path.insert(0, REPO)
  _main()
