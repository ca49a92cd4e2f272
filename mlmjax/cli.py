"""Every command's entry point: its flags parsed, bad input answered in one line, --help.

Each command (`python -m mlmjax.NAME`) ends with

    if __name__ == "__main__":
      cli.run(main, required=("workdir",))

and so behaves like every other:
  a bad command line   an unknown flag or config key (with "did you mean"), a value of the wrong
                       type or outside a flag's choices, a required flag missing, a --config
                       that is neither a file nor a preset, not a config, or refuses its
                       variant, an override the config's phases would ignore: one line
                       `error: ...` naming the flag, exit status 2, before anything runs
  bad input later      a UserError (errors.py) raised by the command: one line `error: ...`,
                       exit status 2 for a command line or config rule, 1 for other failures
  out of memory        on the host or a device: one line with what was needed and what to
                       do (errors.out_of_memory), exit status 1
  --help, -h           the command's docstring and its own flags, exit status 0 (--helpfull:
                       every flag of every module)
  --verbose            tracebacks instead of one-line errors
  --user_dir           a file or package of your own parts (a pretraining objective,
                       training/objectives/), imported before the command runs (user_code.py;
                       a run's own `user_dir` key is imported by every command that reads it)
A --config flag of a file (config_flags.DEFINE_config_file) also takes a preset's name
(presets.py).

Each command module also starts, before its other imports, with

    from mlmjax.parallel import plugins
    plugins.hide()

which hides jax's CUDA plugin and libtpu where they are not used (parallel/plugins.py). That
must happen before jax's first import, which prints CUDA's notice when the plugin is there, and
a command imports the library, so jax, at its top, before it calls `run`. Nothing of mlmjax runs
earlier but the package's __init__, which must not do it (importing mlmjax changes nothing
outside it), so these two lines in each command module are the least there can be: a module
imported for its effect would be an import side effect again, and a launcher of its own would
change `python -m mlmjax.NAME`. `run` calls it too, for a command that imports jax only later
(compile: its target first); once jax is imported it does nothing.
"""

from __future__ import annotations

import difflib
import functools
import gc
import re
import sys
import textwrap

from absl import app
from absl import flags
from ml_collections import config_flags
# is_config_flag and the file parser's class live in the module, not the package's namespace
from ml_collections.config_flags import config_flags as config_flag_types

from mlmjax import errors
from mlmjax import presets
from mlmjax import user_code
from mlmjax.parallel import plugins

_VERBOSE = flags.DEFINE_bool("verbose", False, "Tracebacks instead of one-line errors.")
_USER_DIR = flags.DEFINE_string(
    "user_dir", None, "A .py file or a package folder of your own parts (e.g. a pretraining"
    " objective registered with mlmjax.training.objectives.register), imported before the"
    " command runs.")
_HELP = ("--help", "-help", "-h", "--helpshort", "-helpshort", "-?")
_HELPFULL = ("--helpfull", "-helpfull")


def run(main, required: tuple[str, ...] = (), arguments: bool = False) -> None:
  """absl's app.run of `main` with the command-line conventions above; `required` names the
  flags that must be given; `arguments`: whether it takes arguments besides flags."""
  plugins.hide()  # for a command that has not imported jax yet (the module docstring)
  # The command's module has imported the library: those objects live as long as the process.
  # Frozen, Python's collections no longer walk them: a tiny 8-step run on a 2-core CPU
  # spends 0.33 s in collections instead of 0.70, and 4.9 s of CPU instead of 5.8.
  gc.freeze()
  app.run(functools.partial(_run_main, main),
          flags_parser=functools.partial(parse, required=required, arguments=arguments))


def parse(argv: list[str], required: tuple[str, ...] = (), arguments: bool = False) -> list[str]:
  """Parses `argv` into absl's FLAGS (what main gets back: the program and the arguments that
  are not flags), or prints the one-line error and exits with status 2."""
  options = argv[1:argv.index("--")] if "--" in argv else argv[1:]
  if any(a in _HELP for a in options):
    print(help_text())
    sys.exit(0)
  if any(a in _HELPFULL for a in options):
    print(flags.FLAGS.get_help())
    sys.exit(0)
  try:
    argv = _checked_configs(argv)
    rest = flags.FLAGS(argv)
    if len(rest) > 1 and not arguments:
      raise errors.CommandLineError(f"unexpected argument {rest[1]!r}: this command takes"
                                    " only flags (--help lists them)")
    if _USER_DIR.value:
      user_code.load(_USER_DIR.value, f"--user_dir={_USER_DIR.value}")
    for name in required:
      if flags.FLAGS[name].value in (None, "", []):
        raise errors.CommandLineError(f"--{name} is required: {_one_line(flags.FLAGS[name].help)}")
    for flag in _config_flags():
      message = presets.ignored_overrides(flag.value, config_flags.get_override_values(flag))
      if message:
        raise errors.CommandLineError(message)
  except Exception as e:  # pylint: disable=broad-except  # whatever the command line got wrong
    if "--verbose" in options:
      raise
    _fail(_describe(e), 2)
  return rest


def _run_main(main, argv: list[str]):
  """`main(argv)` with a UserError (and app.UsageError), and running out of memory, as one
  `error:` line."""
  try:
    return main(argv)
  except (errors.UserError, app.UsageError) as e:
    if _VERBOSE.value:
      raise
    _fail(str(e), getattr(e, "exit_status", 2))
  except (MemoryError, RuntimeError) as e:  # jax's JaxRuntimeError is a RuntimeError
    message = errors.out_of_memory(e, _given_config())
    if message is None or _VERBOSE.value:
      raise
    _fail(message, 1)


def _given_config() -> str | None:
  """The --config value of the command line, as given (a preset's name or a file)."""
  at = _given("config", sys.argv)
  if not at:
    return None
  arg = sys.argv[at[-1]]  # --config=VALUE, or --config VALUE (parsed: VALUE follows)
  return arg.split("=", 1)[1] if "=" in arg else sys.argv[at[-1] + 1]


def _exit_on_error(check) -> None:
  """`check()`, its CommandLineError printed as one line (exit status 2)."""
  try:
    check()
  except errors.CommandLineError as e:
    if "--verbose" in sys.argv:
      raise
    _fail(str(e), 2)


def _fail(message: str, status: int) -> None:
  print(f"error: {_one_line(message)}", file=sys.stderr)
  sys.exit(status)


def _one_line(text: str) -> str:
  return " ".join(str(text).split())


# ---- --config: presets by name, each file checked before ml_collections loads it -----------
PRESET_HELP = ("A preset (tiny, bert:base, ...: the files of configs/) or a config file of"
               " yours (FILE.py[:VARIANT]); --config.KEY=VALUE overrides a key (configs/base.py"
               " explains each).")


def define_config_file(name: str = "config", default: str | None = None,
                       help_string: str = PRESET_HELP) -> flags.FlagHolder:
  """A --NAME flag of a pretraining config: a preset's name or a file (presets.py), its keys
  overridden with --NAME.KEY=VALUE."""
  if default is not None and not _given(name, sys.argv):
    # ml_collections loads a default, with sys.argv's overrides, when the flag is defined
    default = presets.resolve(default)
    _exit_on_error(lambda: _check_overrides(name, presets.load(name, default), sys.argv))
  return config_flags.DEFINE_config_file(name, default, help_string, lock_config=True)


def define_config_dict(name: str, config, help_string: str) -> flags.FlagHolder:
  """A --NAME flag of settings made in code (`config`), its keys overridden the same way."""
  # ml_collections applies sys.argv's overrides when the flag is defined
  _exit_on_error(lambda: _check_overrides(name, config, sys.argv))
  return config_flags.DEFINE_config_dict(name, config, help_string)


def _config_flags() -> list:
  """The command's config flags (ml_collections files them under its own module)."""
  found = {id(flags.FLAGS[n]): flags.FLAGS[n] for n in flags.FLAGS}
  return [f for f in found.values() if config_flag_types.is_config_flag(f)]


def _given(name: str, argv: list[str]) -> list[int]:
  """Where --NAME=VALUE or --NAME VALUE is in `argv`."""
  return [i for i, a in enumerate(argv)
          if a.startswith((f"--{name}=", f"-{name}=")) or a in (f"--{name}", f"-{name}")]


def _checked_configs(argv: list[str]) -> list[str]:
  """`argv` with each config file flag's value a file (a preset's name resolved), after
  checking that it loads and that every --NAME.KEY override names a key of it: each a
  CommandLineError naming the flag, where ml_collections would raise from deep inside."""
  out = list(argv)
  for flag in _config_flags():
    given = _given(flag.name, argv)
    if not given and flag.value is None:
      _check_overrides(flag.name, None, argv)  # an override of a config not given
    if not isinstance(flag.parser, config_flag_types.ConfigFileFlagParser) or not given:
      continue  # a default: checked when defined
    if len(given) > 1:
      raise errors.CommandLineError(f"--{flag.name} is given {len(given)} times; give it once")
    i = given[0]
    if "=" not in argv[i]:  # --config FILE
      out[i:i + 2] = [f"{argv[i]}={argv[i + 1] if i + 1 < len(argv) else ''}"]
    value = out[i].split("=", 1)[1]
    _check_overrides(flag.name, presets.load(flag.name, value), argv)
    out[i] = f"--{flag.name}={presets.resolve(value)}"
  return out


def _check_overrides(name: str, config, argv: list[str]) -> None:
  """A CommandLineError unless every --NAME.KEY of `argv` names a key of `config`."""
  for arg in argv:
    key = re.match(rf"-{{1,2}}(?:no)?{name}\.([^=]+)", arg)
    if key and config is None:
      raise errors.CommandLineError(f"--{name}.{key.group(1)} overrides a key of --{name},"
                                    f" which is not given")
    if key:
      _check_key(name, config, key.group(1))


def _check_key(flag: str, config, key: str) -> None:
  """A CommandLineError unless `key` (dotted) names a key of `config`, with the nearest keys."""
  node = config
  for part in key.split("."):
    if not hasattr(node, "keys") or part not in node.keys():
      near = difflib.get_close_matches(key, _keys(config), n=1)
      guess = f" (did you mean --{flag}.{near[0]}?)" if near else ""
      raise errors.CommandLineError(f"--{flag}.{key}: no such config key{guess}")
    node = node[part]


def _keys(config, prefix: str = "") -> list[str]:
  """Every dotted key of a (nested) config."""
  out = []
  for k in config.keys():
    out.append(prefix + k)
    if hasattr(config[k], "keys"):
      out += _keys(config[k], f"{prefix}{k}.")
  return out


# ---- what the user reads ----------------------------------------------------------------------
def _describe(e: BaseException) -> str:
  """One line for an error of the command line: the flag, then what is wrong with it."""
  if isinstance(e, errors.UserError):
    return str(e)
  text = _one_line(e)
  if isinstance(e, flags.UnrecognizedFlagError):
    hint = re.search(r"Did you mean: (.*?) ?\?", text)
    guess = f" (did you mean --{hint.group(1).split(',')[0].strip()}?)" if hint else ""
    return f"--{e.flagname}: unknown flag{guess}"
  text = re.sub(r"^flag (--\S+?)=(.*?): ", r"\1=\2: ", text)
  if "Non-boolean argument to boolean flag" in text:  # absl's words, as a tuple
    return text.split(": ")[0] + ": must be true or false"
  choices = re.search(r"value should be one of <(.*)>$", text)
  if choices:  # absl's enum flags
    allowed = ", ".join(c for c in choices.group(1).split("|") if c)
    return text[:choices.start()] + f"must be one of {allowed}"
  return text


def help_text() -> str:
  """--help: the command's docstring, then its own flags (config flags by where their keys
  are explained, not their whole default)."""
  doc = (sys.modules["__main__"].__doc__ or "").strip()
  lines = [doc, "", "flags:"]
  own = flags.FLAGS.flags_by_module_dict().get(_main_module(), [])
  shown = {f.name: f for f in own + _config_flags()
           + [flags.FLAGS[_VERBOSE.name], flags.FLAGS[_USER_DIR.name]]}
  for flag in sorted(shown.values(), key=lambda f: f.name):
    has_default = (not config_flag_types.is_config_flag(flag)
                   and flag.default not in (None, "", []))
    default = f" (default: {flag.default_as_str})" if has_default else ""
    lines.append(textwrap.fill(f"--{flag.name}: {_one_line(flag.help)}{default}", width=96,
                               initial_indent="  ", subsequent_indent="      ",
                               break_long_words=False, break_on_hyphens=False))
  return "\n".join(lines)


def _main_module() -> str:
  """The name absl files the running command's flags under."""
  return sys.argv[0]
