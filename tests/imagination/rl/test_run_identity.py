"""A run's identity: which config fields make a resume another run, and fields added after a checkpoint was written."""
from pathlib import Path

import pytest

from imagination.rl.config import ImagineRLConfig
from imagination.rl.run_identity import check_same_run, differing, run_identity


def test_resumable_fields_are_left_out_and_others_differ_by_dotted_name():
    base = ImagineRLConfig()
    longer = run_identity(ImagineRLConfig(iterations=99, out_dir="elsewhere"))
    assert differing(run_identity(base), longer) == []
    other = ImagineRLConfig(seed=3, frozen=["image_encoder"])
    other.imagination.imagined_steps = 7
    assert differing(run_identity(base), run_identity(other)) == ["frozen", "imagination.imagined_steps", "seed"]


def test_a_field_the_checkpoint_predates_reads_as_its_default(tmp_path: Path):
    """A checkpoint written before `frozen` (or an imagination field) existed ran with the default: resuming it at the
    default is the same run; at another value it is refused by name."""
    defaults = run_identity(ImagineRLConfig())
    stored = run_identity(ImagineRLConfig())
    del stored["frozen"]
    del stored["imagination"]["imagined_steps"]
    check_same_run(stored, run_identity(ImagineRLConfig()), tmp_path / "checkpoint.pt", defaults=defaults)
    with pytest.raises(ValueError, match=r"another run \(frozen differ\)"):
        check_same_run(stored, run_identity(ImagineRLConfig(frozen=["image_encoder"])), tmp_path / "checkpoint.pt",
                       defaults=defaults)
    with pytest.raises(ValueError, match=r"another run \(frozen, imagination.imagined_steps differ\)"):  # no defaults
        check_same_run(stored, run_identity(ImagineRLConfig()), tmp_path / "checkpoint.pt")
