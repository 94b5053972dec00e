"""plan_round (xdl_ec.ps.copy_rounds): a pre-copy round's reads, one per unfinished shard, its slots split
evenly, a shard whose end is known asking at most what it has left and the others taking the rest."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from xdl_ec.ps.copy_rounds import CopiedShard, plan_round


def shard(next_slot: int = 0, end: Optional[int] = None, done: bool = False) -> CopiedShard:
    c = CopiedShard()
    c.next_slot, c.end, c.reached_end = next_slot, end, done
    return c


def test_shards_not_read_yet_share_the_round_evenly_in_order() -> None:
    copied: Dict[Tuple[str, int], CopiedShard] = {("t", p): shard() for p in range(3)}
    assert plan_round(copied, 10) == [("t", 0, 4), ("t", 1, 4), ("t", 2, 4)]


def test_a_shard_near_its_end_asks_what_it_has_left_and_the_others_take_the_rest() -> None:
    copied = {("a", 0): shard(98, 100), ("a", 1): shard(), ("b", 0): shard(0, 100)}
    assert plan_round(copied, 30) == [("a", 0, 2), ("a", 1, 14), ("b", 0, 14)]
    assert plan_round({("a", 0): shard(98, 100), ("b", 0): shard(90, 100)}, 1000) == [("a", 0, 2), ("b", 0, 10)]


def test_finished_shards_are_left_out() -> None:
    copied = {("a", 0): shard(50, 50, done=True), ("a", 1): shard(60, 70), ("a", 2): shard()}
    assert plan_round(copied, 8) == [("a", 1, 4), ("a", 2, 4)]
    assert plan_round({("a", 0): shard(done=True)}, 8) == []
