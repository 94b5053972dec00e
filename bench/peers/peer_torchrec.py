"""The TorchRec peer on the CPU: torchrec's ``DLRM`` over an ``EmbeddingBagCollection``, sharded by
``DistributedModelParallel`` in one process (gloo, world size 1, no data-parallel wrapper: there is nothing to
all-reduce) so the tables run in fbgemm's CPU table-batched kernel with Adagrad(0.02) fused into the backward, as
TorchRec trains them; Adam on the dense layers. In TorchRec's own environment (torch 2.13.0 CPU, fbgemm-gpu-cpu and
torchrec 1.8.0; see setup_envs.sh).

Matches xdl-ec's DLRM: bottom (64, 16) ReLU, the strict upper triangle of the dot products of the 27 vectors
concatenated with the bottom output, top (64, 32) ReLU and a linear logit; Linear layers re-initialised as Keras'
defaults (Glorot uniform, zero bias), rows uniform in [-0.05, 0.05); fbgemm's Adagrad starts its accumulator at
0, as every system here does (hyperparameters.py).

Tables: ``criteo-shaped`` / ``criteo-sample`` one table of 2^20 rows shared by the 26 features, indexed by
``key mod 2^20``; ``fields-100k`` one table of 100k rows per field.

    ~/.cache/xdl-ec-peers/torchrec/bin/python bench/peers/peer_torchrec.py --data FILE.npz --batch-size 2048 --steps 300
"""

from __future__ import annotations

import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run with python -P: the harness beside it
# torch's OpenMP threads spin at their barriers by default; with the other core busy (a shared machine) a 2048 x 367
# by 367 x 64 matmul took 26-30 ms on 2 threads against 3 ms on one, and the peer ran at 3k samples/s instead of
# 33k. Passive waiting removes that; set OMP_WAIT_POLICY=ACTIVE to measure torch's default.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torchrec  # noqa: E402
from hyperparameters import (
    ADAGRAD_EPSILON,
    BOTTOM_MLP,
    DENSE_LR,
    EMB_DIM,
    FIELD_ROWS_CAP,
    ROW_INIT,
    SHARED_ROWS,
    SPARSE_LR,
    TOP_MLP,
)
from peer_harness import parse_args, run_peer, stepper  # noqa: E402
from shared_batches import NUM_DENSE, SharedBatches, field_rows  # noqa: E402
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor  # noqa: E402
from torchrec.distributed.model_parallel import DistributedModelParallel  # noqa: E402
from torchrec.models.dlrm import DLRM  # noqa: E402
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward  # noqa: E402
from torchrec.optim.keyed import KeyedOptimizerWrapper  # noqa: E402
from torchrec.optim.optimizers import in_backward_optimizer_filter  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    args = parse_args(__doc__.split("\n\n")[0])
    data = SharedBatches(args.data)
    torch.manual_seed(0)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    per_field, widths = data.per_field, data.widths
    feature_names = [f"C{i + 1}" for i in range(len(widths))]
    starts = np.concatenate([[0], np.cumsum(widths)])
    sizes = field_rows(data.workload, FIELD_ROWS_CAP)

    def rows_init(weight: torch.Tensor) -> torch.Tensor:
        return torch.nn.init.uniform_(weight, -ROW_INIT, ROW_INIT)

    if per_field:
        tables = [
            EmbeddingBagConfig(
                name=f"t_{f}", embedding_dim=EMB_DIM, num_embeddings=rows, feature_names=[f], init_fn=rows_init
            )
            for f, rows in zip(feature_names, sizes)
        ]
    else:
        tables = [
            EmbeddingBagConfig(
                name="t_shared",
                embedding_dim=EMB_DIM,
                num_embeddings=SHARED_ROWS,
                feature_names=feature_names,
                init_fn=rows_init,
            )
        ]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    model = DLRM(
        embedding_bag_collection=ebc,
        dense_in_features=NUM_DENSE,
        dense_arch_layer_sizes=[*BOTTOM_MLP, EMB_DIM],
        over_arch_layer_sizes=[*TOP_MLP, 1],
        dense_device=torch.device("cpu"),
    )
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):  # Keras' defaults, as in the other systems
            torch.nn.init.xavier_uniform_(module.weight)
            torch.nn.init.zeros_(module.bias)
    apply_optimizer_in_backward(
        torch.optim.Adagrad, model.sparse_arch.parameters(), {"lr": SPARSE_LR, "eps": ADAGRAD_EPSILON}
    )
    dmp = DistributedModelParallel(module=model, device=torch.device("cpu"), init_data_parallel=False)
    dense_optimizer = KeyedOptimizerWrapper(
        dict(in_backward_optimizer_filter(dmp.named_parameters())),
        lambda params: torch.optim.Adam(params, lr=DENSE_LR, eps=1e-7),
    )
    loss_fn = torch.nn.BCEWithLogitsLoss()

    def features(sparse: np.ndarray) -> KeyedJaggedTensor:
        if not per_field:
            ids = torch.remainder(torch.from_numpy(np.ascontiguousarray(sparse.T)).reshape(-1), SHARED_ROWS)
            lengths = torch.ones(ids.numel(), dtype=torch.int32)  # feature-major, one id per bag
        else:  # feature-major, a field's ids of one example in one bag (mod its table's rows)
            parts = [sparse[:, starts[i] : starts[i + 1]].reshape(-1) % rows for i, rows in enumerate(sizes)]
            ids = torch.from_numpy(np.concatenate(parts))
            lengths = torch.from_numpy(np.repeat(np.asarray(widths, dtype=np.int32), sparse.shape[0]))
        return KeyedJaggedTensor.from_lengths_sync(keys=feature_names, values=ids, lengths=lengths)

    def step(dense: np.ndarray, sparse: np.ndarray, label: np.ndarray) -> float:
        logits = dmp(torch.from_numpy(dense), features(sparse)).squeeze(1)
        loss = loss_fn(logits, torch.from_numpy(label))
        dense_optimizer.zero_grad()
        loss.backward()  # the tables' Adagrad runs inside the backward
        dense_optimizer.step()
        return float(loss.detach())

    def predict(dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return torch.sigmoid(dmp(torch.from_numpy(dense), features(sparse)).squeeze(1)).numpy()

    try:
        run_peer(
            "TorchRec DLRM",
            data,
            args,
            stepper(step, data.train_batches(args.batch_size, args.steps)),
            predict,
            {
                "version": f"torchrec {torchrec.__version__}, torch {torch.__version__}, "
                f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}",
                "tables": f"{len(tables)} tables, {sum(t.num_embeddings for t in tables):,} rows",
            },
        )
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
