"""EpisodeMeta rows from the reader, EpisodeDataset.select and select_meta filters."""
from __future__ import annotations

import dataclasses
import json

import pytest

from robot_data.dataset import EpisodeDataset, EpisodeMeta, select_meta
from robot_data.dataset.layout import episode_file_path
from tests.robot_data.test_dataset import make_episodes, write


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> EpisodeDataset:
    root = tmp_path_factory.mktemp("meta")
    write(root, make_episodes())  # task 1 expert, task 4 perturbed, task 1 policy; lengths 12, 25, 17
    return EpisodeDataset(root, verify=False)


def test_meta_rows_are_typed_and_match_the_episodes(dataset: EpisodeDataset) -> None:
    episodes = make_episodes()
    meta = dataset.meta
    assert all(isinstance(m, EpisodeMeta) for m in meta)
    assert [m.episode_index for m in meta] == [0, 1, 2]
    assert [(m.dataset_from_index, m.dataset_to_index) for m in meta] == [(0, 12), (12, 37), (37, 54)]
    for m, e in zip(meta, episodes):
        assert (m.length, m.instruction, m.suite, m.task_id, m.source, m.perturbation, m.seed, m.init_state_id,
                m.extra) == (len(e), e.instruction, e.suite, e.task_id, e.source, e.perturbation, e.seed,
                             e.init_state_id, e.extra)
        assert m.success is e.episode_success
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta[0].task_id = 3  # type: ignore[misc]


def test_meta_copies_keep_the_datasets_extra_intact(dataset: EpisodeDataset) -> None:
    dataset.meta[0].extra["note"] = "edited"
    assert dataset.meta[0].extra["note"] == "first"
    assert dataset[0].extra["note"] == "first"


def test_as_dict_is_the_former_metadata_dict(dataset: EpisodeDataset) -> None:
    # the keys of the episode's meta/episodes row, in that order, then extra decoded from extra_json
    import pyarrow.parquet as pq

    row = pq.read_table(dataset.root / episode_file_path(dataset.config, "episodes", 0)).to_pylist()[0]
    d = dataset.meta[0].as_dict()
    assert list(d) == ["episode_index", "length", "dataset_from_index", "dataset_to_index", "instruction", "suite",
                       "task_id", "source", "perturbation", "seed", "init_state_id", "success", "extra"]
    assert {k: v for k, v in d.items() if k != "extra"} == {k: row[k] for k in d if k != "extra"}
    assert d["extra"] == json.loads(row["extra_json"])
    json.dumps(d)  # plain JSON, as results and digests need


def test_select_filters_by_value_and_by_membership(dataset: EpisodeDataset) -> None:
    assert dataset.select() == [0, 1, 2]
    assert dataset.select(task_id=1) == [0, 2]
    assert dataset.select(task_id=1, source="policy") == [2]
    assert dataset.select(source=["expert", "perturbed"]) == [0, 1]
    assert dataset.select(task_id=(4,), source=None) == [1]  # None filters nothing
    assert dataset.select(task_id=[]) == []  # an empty collection matches nothing
    assert dataset.select(init_state_id=3) == [0]
    assert dataset.select(perturbation="early_release") == [1]
    success = [i for i, e in enumerate(make_episodes()) if e.episode_success]
    assert dataset.select(success=True) == success
    assert dataset.select(success=False) == [i for i in range(3) if i not in success]
    picked = select_meta(dataset.meta, task_id=1)
    assert [m.episode_index for m in picked] == [0, 2] and all(isinstance(m, EpisodeMeta) for m in picked)


@pytest.mark.parametrize("name", ["taskid", "extra", "episode"])
def test_select_names_an_unknown_field(dataset: EpisodeDataset, name: str) -> None:
    with pytest.raises(TypeError, match=f"unknown episode metadata field '{name}'.*'task_id'"):
        dataset.select(**{name: 1})
    with pytest.raises(TypeError, match=f"'{name}'"):
        select_meta(dataset.meta, **{name: None})  # checked even when it would filter nothing


def test_copy_is_equal_and_independent() -> None:
    m = EpisodeMeta(0, 5, 0, 5, "do it", "libero_spatial", 2, "expert", "", 0, -1, False, {"style": 1})
    c = m.copy()
    assert c == m and c.extra is not m.extra
