"""Config parsing shared by the scripts: presets, overrides, --help, clear errors."""
from dataclasses import dataclass, field

import pytest

from infra.cli import load_config, parse_config


@dataclass
class _Cfg:
    name: str = "x"
    steps: int = 3
    tasks: list[int] = field(default_factory=list)


def test_overrides_are_typed(tmp_path):
    cfg = load_config(_Cfg, overrides=["steps=7", "tasks=[1,2]"])
    assert cfg == _Cfg(name="x", steps=7, tasks=[1, 2])
    preset = tmp_path / "p.yaml"
    preset.write_text("name: from_preset\nsteps: 5\n")
    cfg = load_config(_Cfg, str(preset), ["steps=9"])
    assert (cfg.name, cfg.steps) == ("from_preset", 9)


def test_bad_values_name_the_field(capsys):
    with pytest.raises(SystemExit):
        parse_config(_Cfg, "d", "none", ["steps=abc"])
    assert "steps" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_config(_Cfg, "d", "none", ["bogus=1"])
    assert "bogus" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_config(_Cfg, "d", "none", ["--config", "no_such_preset"])
    assert "no_such_preset" in capsys.readouterr().err


def test_help_lists_fields(capsys):
    with pytest.raises(SystemExit) as e:
        parse_config(_Cfg, "my script", "none", ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "my script" in out and "steps" in out and "tasks" in out


def test_yaml_boolean_words_stay_strings_in_string_fields():
    # YAML 1.1 reads a bare no/off as false; a string field (mixed_precision=no) must keep the word
    assert load_config(_Cfg, overrides=["name=no"]).name == "no"
    assert load_config(_Cfg, overrides=["name=Off"]).name == "Off"
    assert load_config(_Cfg, overrides=["name=nothing"]).name == "nothing"


def test_string_fields_keep_values_yaml_reads_as_mappings():
    # YAML reads `::` as the mapping {':': None}; a host field must get the IPv6 address as written
    assert load_config(_Cfg, overrides=["name=::"]).name == "::"
    assert load_config(_Cfg, overrides=["name=[::1]"]).name == "[::1]"
    assert load_config(_Cfg, overrides=["name=it's"]).name == "it's"
    assert load_config(_Cfg, overrides=["tasks=[1,2]"]).tasks == [1, 2]  # list fields still read lists


def test_yaml_boolean_words_stay_strings_in_string_fields_of_presets(tmp_path):
    @dataclass
    class Inner:
        mode: str = "report"
        enabled: bool = False

    @dataclass
    class Outer:
        precision: str = "fp16"
        inner: Inner = field(default_factory=Inner)

    preset = tmp_path / "p.yaml"
    preset.write_text("precision: no\ninner:\n  mode: Off\n  enabled: yes\n")
    cfg = load_config(Outer, str(preset))
    assert (cfg.precision, cfg.inner.mode, cfg.inner.enabled) == ("no", "Off", True)  # a bool field still reads yes


@dataclass
class _Inner:
    # how often to blink
    # (two comment lines above a field)
    rate: float = 1.0
    mode: str = "a"  # a | b


@dataclass
class _Base:
    steps: int = 3  # optimisation steps
    undocumented: int = 0


@dataclass
class _Outer(_Base):
    inner: _Inner = field(default_factory=_Inner)  # the inner block
    steps: int = 5  # steps, as the subclass documents them
    tagged: int = field(default=1, metadata={"help": "from metadata"})  # the comment loses to metadata


def test_field_docs_come_from_comments_above_and_after_each_field():
    from infra.cli import field_docs

    assert field_docs(_Inner) == {"rate": "how often to blink (two comment lines above a field)", "mode": "a | b"}
    docs = field_docs(_Outer)  # inherited fields included; the subclass's comment wins
    assert docs["steps"] == "steps, as the subclass documents them" and "undocumented" not in docs
    assert docs["inner"] == "the inner block"


def test_help_shows_each_fields_comment_and_nested_fields(capsys):
    with pytest.raises(SystemExit):
        parse_config(_Outer, "d", "none", ["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "inner.rate float default: 1.0 how often to blink (two comment lines above a field)" in out
    assert "inner.mode str default: 'a' a | b" in out
    assert "steps int default: 5 steps, as the subclass documents them" in out
    assert "tagged int default: 1 from metadata" in out and "loses to metadata" not in out


def test_a_real_scripts_help_shows_the_config_comments(capsys):
    from imagination.eval.real_rollouts import EvalPolicyConfig

    with pytest.raises(SystemExit) as e:
        parse_config(EvalPolicyConfig, "evaluate", "eval", ["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    # EvalConfig's trailing comment of episodes_per_task, and the subclass's own field
    assert "episodes_per_task int default: 10 episodes run per task (the 95% interval" in out
    assert "record_to str default: '' a dataset folder: append every real episode" in out
