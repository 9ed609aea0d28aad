"""Changes (what evolve touched): ``nodes_since`` answers the same from its bounded log of recent
touches as from the per-node record, before and after the log is compacted."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.allocator.domain.state import Changes


def _expected(touches: list[str], mark: int) -> list[str]:
    last = {name: seq for seq, name in enumerate(touches, start=1)}
    return sorted((n for n, seq in last.items() if seq > mark), key=lambda n: -last[n])


@given(touches=st.lists(st.sampled_from([f"n{i}" for i in range(6)]), max_size=60),
       limit=st.integers(1, 10), data=st.data())
def test_nodes_since_lists_each_node_touched_after_the_mark_most_recent_first(
        touches: list[str], limit: int, data: st.DataObject) -> None:
    changes = Changes(log_limit=limit)
    for name in touches:
        changes.touch(name)
    mark = data.draw(st.integers(0, len(touches)))
    assert changes.seq == len(touches)
    assert list(changes.nodes_since(mark)) == _expected(touches, mark)


def test_a_mark_older_than_the_log_is_still_answered() -> None:
    changes = Changes(log_limit=2)
    for name in ["a", "b", "c", "a", "d"]:
        changes.touch(name)
    assert list(changes.nodes_since(0)) == ["d", "a", "c", "b"]
    assert list(changes.nodes_since(4)) == ["d"]
