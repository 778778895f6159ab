"""`EpisodeMeta`: one episode's metadata row, as the reader returns it, and `select_meta` to filter them.

The fields are the metadata columns `EpisodeWriter` puts in the episode's meta/episodes row (the same
names there, so the files on disk are unchanged), with `extra` decoded from its `extra_json` column.
Metadata is cheap (no frames, no stats), so `EpisodeDataset` reads all of it when it opens.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class EpisodeMeta:
    """Metadata of one recorded episode (no frames).

    episode_index: position in the dataset; length: T steps; dataset_from_index / dataset_to_index:
    the episode's global frame rows [from, to); instruction, suite, task_id, source (robot_data.dataset.SOURCES),
    perturbation ("" if none), seed, init_state_id (-1 if unknown): as on `Episode`; success: the
    simulator reported success at some step (`Episode.episode_success`); extra: the episode's free-form
    JSON dict (style, plan_index, policy, outcome, ...).
    """

    episode_index: int
    length: int
    dataset_from_index: int
    dataset_to_index: int
    instruction: str
    suite: str
    task_id: int
    source: str
    perturbation: str
    seed: int
    init_state_id: int
    success: bool
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (extra copied), in field order: for JSON and digests."""
        return asdict(self)

    def copy(self) -> EpisodeMeta:
        """A copy whose `extra` dict is the caller's own (the dataclass is frozen; its dict is not)."""
        return EpisodeMeta(**{f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"},
                           extra=dict(self.extra))


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(EpisodeMeta))


def select_meta(metas: Iterable[EpisodeMeta], **filters: Any) -> list[EpisodeMeta]:
    """The metas matching every filter, in order. Each keyword names a field; its value is None (no
    filter), a list, tuple, set or frozenset (the field is one of them; an empty one matches nothing), or
    a single value the field must equal:

        select_meta(ds.meta, source="expert", success=True, task_id=[0, 3])

    Raises TypeError naming an unknown field (`extra` cannot be filtered on: it has no fixed keys)."""
    unknown = [k for k in filters if k not in FIELDS or k == "extra"]
    if unknown:
        raise TypeError(f"select: unknown episode metadata field {unknown[0]!r}; expected one of "
                        f"{[f for f in FIELDS if f != 'extra']}")
    tests = [(k, v) for k, v in filters.items() if v is not None]
    return [m for m in metas if all(_matches(getattr(m, k), v) for k, v in tests)]


def _matches(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, (list, tuple, set, frozenset)):
        return value in wanted
    return bool(value == wanted)
