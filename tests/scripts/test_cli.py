"""Config parsing shared by the scripts: presets, overrides, --help, clear errors."""
from dataclasses import dataclass, field

import pytest

from scripts.cli import load_config, parse_config


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
