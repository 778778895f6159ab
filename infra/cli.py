"""Config parsing shared by the scripts and the benchmarks: a config dataclass, an optional YAML preset, overrides.

    python scripts/collect.py --config quick episodes_per_task=3 tasks=[0,1]

OmegaConf merges dataclass defaults <- preset YAML <- `key=value` overrides and type-checks every
value against the dataclass, so a bad value is reported with its field name. `--help` lists every
field with its type, default and documentation, generated from the dataclass itself: a field is
documented by its trailing `# comment` and the comment lines right above it (or metadata["help"]);
nested config dataclasses are listed field by field under their dotted names.

Every script's entry point is `run_script(main, Config, __doc__, group)`: it parses the command line,
builds the config and runs `main(cfg)`, and an input error on the way (a bad value, a missing file, a
damaged dataset or checkpoint) is printed as one line naming the field or path, exit status 2
(infra.errors). `--traceback`, or VLA_TRACEBACK=1, prints the full trace instead.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import io
import re
import textwrap
import tokenize
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from infra.atomic import atomic_write_text
from infra.errors import TRACEBACK_ENV, TRACEBACK_FLAG, end_process, one_line_errors, traceback_wanted

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIGS = REPO_ROOT / "configs"

T = TypeVar("T")


def _fields_help(cls: type) -> str:
    rows: list[tuple[str, str, str, str]] = []
    _field_rows(cls, "", rows)
    width = min(max((len(name) for name, *_ in rows), default=0), 40)
    lines = ["config fields (set with key=value; lists as key=[a,b], dicts as 'key={a:1,b:2}' or key.a=1):"]
    for name, type_name, value, doc in rows:
        lines.append(f"  {name:<{width}}  {type_name:<18} {value}")
        lines += textwrap.wrap(doc, width=100, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def _field_rows(cls: type, prefix: str, rows: list[tuple[str, str, str, str]]) -> None:
    """(dotted name, type, default, doc) of every field of `cls`; nested config dataclasses field by field."""
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "required"
        type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        name, doc = prefix + f.name, f.metadata.get("help") or docs.get(f.name, "")
        nested = dataclasses.is_dataclass(default) and not isinstance(default, type)
        rows.append((name, type_name, "(nested: its fields follow)" if nested else f"default: {default!r}", doc))
        if nested:
            _field_rows(type(default), name + ".", rows)


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its comment in the source of dataclass `cls` (inherited fields included).

    A field's documentation is the block of comment lines right above it plus its trailing comment:

        # the policy's chunk (mean) if True, else sampled
        deterministic: bool = True
        episodes_per_task: int = 10  # episodes run per task
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):  # a subclass's comment wins over its base's
        if dataclasses.is_dataclass(klass):
            docs.update(_own_field_comments(klass))
    return docs


def _own_field_comments(klass: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(klass))
        tree = ast.parse(source)
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (OSError, TypeError, SyntaxError, tokenize.TokenError):
        return {}  # no source (built in a REPL, frozen app): no docs, the rest of --help still works
    trailing: dict[int, str] = {}  # line -> comment after code on that line
    alone: dict[int, str] = {}  # line -> comment on a line of its own
    code_lines: set[int] = set()
    layout = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            line = tok.start[0]
            (trailing if line in code_lines else alone)[line] = tok.string.lstrip("#").strip()
        elif tok.type not in layout:
            code_lines.update(range(tok.start[0], tok.end[0] + 1))
    class_def = next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)
    docs: dict[str, str] = {}
    for node in class_def.body if class_def else []:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line in alone:
            above.insert(0, alone[line])
            line -= 1
        after = [trailing[n] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1) if n in trailing]
        text = " ".join(c for c in above + after if c)
        if text:
            docs[node.target.id] = text
    return docs


def _preset_path(name: str, group: str) -> Path:
    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    candidate = CONFIGS / group / f"{name}.yaml"
    if candidate.exists():
        return candidate
    available = sorted(x.stem for x in (CONFIGS / group).glob("*.yaml")) if (CONFIGS / group).is_dir() else []
    raise FileNotFoundError(f"--config: no preset {name!r} (looked for {p} and {candidate}); "
                            f"available presets: {available}")


def build_parser(cls: type, description: str, group: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=description,
        epilog=_fields_help(cls),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", default=None, help=f"YAML preset: a path, or a name in configs/{group}/")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of config fields (OmegaConf dotlist)")
    return parser


def load_config(cls: type[T], preset: str | None = None, overrides: Sequence[str] = (), group: str = "") -> T:
    """Merge `cls` defaults <- preset <- overrides into a validated `cls` instance."""
    cfg = OmegaConf.structured(cls)
    if preset:
        cfg = OmegaConf.merge(cfg, _load_preset(cfg, _preset_path(preset, group)))
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ValueError(f"overrides: expected key=value, got {bad}")
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([_string_kept(cfg, _spaced_mapping(o)) for o in overrides]))
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


# YAML 1.1 words OmegaConf reads as booleans; a string field would then hold "False"/"True"
_YAML_BOOLS = {"y", "yes", "n", "no", "on", "off", "true", "false"}


def _string_kept(cfg, override: str) -> str:
    """`mixed_precision=no` -> `mixed_precision='no'` when the field holds a string.

    Override values are read as YAML, where a bare no/off/yes/on is a boolean; for a string field
    (mixed_precision: no | fp16, uncertainty: off | report) that is never what the user meant."""
    key, value = override.split("=", 1)
    word = value.strip()
    if isinstance(OmegaConf.select(cfg, key, default=None), str) and (word.lower() in _YAML_BOOLS
                                                                     or _not_yaml_scalar(word)):
        quoted = word.replace("'", "''")
        return f"{key}='{quoted}'"
    return override


def _not_yaml_scalar(word: str) -> bool:
    """True when YAML reads `word` as a mapping or list, or not at all: `host=::` is the mapping {':': None}."""
    try:
        return isinstance(yaml.safe_load(word), (dict, list))
    except yaml.YAMLError:
        return True


def _load_preset(schema, path: Path):
    """The preset YAML at `path`, where `schema` holds a string, with the YAML 1.1 boolean words kept as
    written (`mixed_precision: no`, `uncertainty: off`): the rule `_string_kept` applies to overrides."""
    data = OmegaConf.to_container(OmegaConf.load(path))
    words = yaml.load(path.read_text(), Loader=yaml.BaseLoader)  # every scalar as the word written
    return OmegaConf.create(_words_kept(schema, data, words) if isinstance(data, dict) else data)


def _words_kept(schema, data: dict, words: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and isinstance(words.get(key), dict):
            value = _words_kept(schema, value, words[key], path + ".")
        elif isinstance(value, bool) and isinstance(OmegaConf.select(schema, path, default=None), str):
            value = words[key]
        out[key] = value
    return out


# `key:value` right after `{` or `,` in a flow mapping; not `http://`-like values
_TIGHT_KEY = re.compile(r"([{,]\s*)([A-Za-z_][\w.-]*):(?=[^\s/])")


def _spaced_mapping(override: str) -> str:
    """`a.b={x:1,y:2}` -> `a.b={x: 1,y: 2}`.

    Override values are read as YAML, where `{x:1}` is the one key "x:1" with no value; a dict field
    set from a shell is almost always written that way, so add the space YAML needs after each key.
    """
    key, value = override.split("=", 1)
    if not value.lstrip().startswith("{"):
        return override
    return key + "=" + _TIGHT_KEY.sub(r"\1\2: ", value)


def run_script(main: Callable[[T], object], cls: type[T], description: str, group: str,
               argv: Sequence[str] | None = None, extra: tuple[type[BaseException], ...] = ()) -> None:
    """A script's entry point: parse the command line into a `cls` config and run `main(cfg)`.

    A bad config, a missing input or a damaged dataset or checkpoint, whether found while parsing or
    while running, ends the script with one line on stderr ("<script>: <field or path>: ...") and exit
    status 2; `extra` adds exception types a script reports the same way (a port in use). --traceback or
    VLA_TRACEBACK=1 prints the full trace instead. Other exceptions are bugs and keep their traceback."""
    def run() -> None:
        parser = build_parser(cls, description, group)
        parser.add_argument(TRACEBACK_FLAG, action="store_true",
                            help=f"on an input error print the full traceback, not one line (or set {TRACEBACK_ENV}=1)")
        args = parser.parse_args(argv)
        with one_line_errors(Path(parser.prog).stem, traceback_wanted(args.traceback), extra):
            try:
                cfg = load_config(cls, args.config, args.overrides, group)
            except OmegaConfBaseException as e:
                raise ValueError(_omegaconf_message(e)) from e
            main(cfg)

    if argv is None:  # the real command line: the process ends through one cleanup on every path (end_process)
        end_process(run)
    run()


def parse_config(cls: type[T], description: str, group: str, argv: Sequence[str] | None = None) -> T:
    """Parse the command line into a `cls` config; one clear error message on bad input."""
    parser = build_parser(cls, description, group)
    args = parser.parse_args(argv)
    try:
        return load_config(cls, args.config, args.overrides, group)
    except (OmegaConfBaseException, ValueError, FileNotFoundError) as e:
        parser.error(str(e).strip().splitlines()[0] if isinstance(e, FileNotFoundError) else _omegaconf_message(e))
    raise AssertionError("unreachable")  # parser.error exits


def _omegaconf_message(e: Exception) -> str:
    # OmegaConf messages carry the offending key as "full_key: x"; keep the first line and that key.
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    key = next((ln for ln in lines if ln.startswith("full_key:")), "")
    return f"config: {lines[0] if lines else e}" + (f" ({key})" if key and key not in lines[0] else "")


def save_config(cfg: object, path: Path) -> None:
    """Write the resolved config next to a run's outputs (reproducibility), atomically."""
    atomic_write_text(path, OmegaConf.to_yaml(OmegaConf.structured(cfg)))

