"""Small shards and the parity their stripes should hold: shared by the parity-forwarding tests
(test_delta_forwarder, test_parity_link)."""

from __future__ import annotations

from typing import Any, List

import numpy as np

from xdl_ec import _core
from xdl_ec.sparse import init, optim


def small_shard() -> Any:
    """A dim-4 Adagrad shard with 8-slot blocks, so a few keys span several stripes."""
    config = _core.ShardConfig()
    config.dim, config.seed, config.block_slots = 4, 5, 8
    config.optimizer = optim.Adagrad(0.1).to_config()
    config.initializer = init.RandomUniform(-0.1, 0.1).to_config()
    return _core.EmbeddingShard(config)


def encoded_parity(shards: List[Any], stripe: int, k: int, r: int) -> np.ndarray:
    """Parity block 0 of ``stripe`` re-encoded from its data blocks on ``shards`` (n = len(shards))."""
    from xdl_ec.sparse.codec import ErasureCode

    layout = _core.StripeLayout(len(shards), k, r)
    blocks = [shards[s].read_block(b) for s, b in (layout.data_member(stripe, j) for j in range(k))]
    return ErasureCode(k, r).encode(np.stack(blocks))[0]
