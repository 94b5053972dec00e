"""A parameter server takes an Evict(ttl_seconds) cutoff as a push part's sixth item: it checks it (an int in
[0, step], else a clear error that applies nothing), a sync step applies it once all workers pushed (and they must
agree), and the step's pass frees the rows last updated before it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from xdl_ec.ps.server import ParameterServer
from xdl_ec.sparse.row_rules import Evict
from xdl_ec.sparse.table_config import Table

DIM = 4
TABLE = Table("t", DIM, block_slots=8, evict=Evict(ttl_seconds=1.0, every_steps=2))


def part(keys: Any, seq: int, ttl_before: Any = 0) -> tuple:
    keys = np.asarray(keys, np.int64)
    return ("t", keys, np.full((keys.size, DIM), 0.5, np.float32), seq, None, ttl_before)


@pytest.mark.parametrize("ttl_before", [-1, 5, 1.5, "2"])
def test_a_bad_cutoff_is_a_clear_error_that_applies_nothing(ttl_before: Any) -> None:
    server = ParameterServer(0, [TABLE])
    try:
        server.push([part([1, 2], 1)], 1)
        before = server.export("t")
        with pytest.raises((ValueError, TypeError), match="ttl_before"):
            server.push([part([3], 2, ttl_before)], 4)
        after = server.export("t")
        assert all(np.array_equal(before[k], after[k]) for k in before)
        assert server.push_state(0) == (False, 1)
    finally:
        server.close()


def test_a_sync_step_applies_the_cutoff_its_workers_agree_on() -> None:
    server = ParameterServer(0, [TABLE])
    try:
        server.push([part([1, 2], 1)], 1, 0, 2)
        server.push([part([3], 1)], 1, 1, 2)
        server.push([part([3], 2, 2)], 2, 0, 2)
        with pytest.raises(ValueError, match="ttl_before 1, another worker's part 2"):
            server.push([part([4], 2, 1)], 2, 1, 2)
        assert sorted(server.export("t")["keys"].tolist()) == [1, 2, 3]  # the step waits for worker 1 still
        server.push([part([4], 2, 2)], 2, 1, 2)
        assert sorted(server.export("t")["keys"].tolist()) == [3, 4]  # 1 and 2 were last updated at step 1 < 2
    finally:
        server.close()
