"""The training set-up every system of the peer benchmark uses (numpy-free: every environment imports it).

Sparse Adagrad's accumulator starts at 0 everywhere: fbgemm's fused Adagrad (TorchRec) and TFRA's slot tables start
there and take no start value (TFRA ignores ``initial_accumulator_value``: its accumulator read 4e-6 = g^2 after one
step from 0.1). xdl-ec's default start, 0.1, makes a row's first steps smaller by sqrt(0.1) / |g| (~30x at g = 0.01),
which cost 0.07 hold-out AUC at 300 steps of batch 2048 (0.746 against 0.816): a set-up difference, not a system's, so
xdl-ec and plain Keras start at 0 here too.
"""

EMB_DIM = 16
SPARSE_LR = 0.02  # Adagrad on the rows
ADAGRAD_START = 0.0  # the accumulator's initial value
ADAGRAD_EPSILON = 1e-7  # added to sqrt(accumulator)
DENSE_LR = 0.001  # Adam on the DLRM body (Keras defaults otherwise: betas 0.9 / 0.999, epsilon 1e-7)
ROW_INIT = 0.05  # rows start uniform in [-ROW_INIT, ROW_INIT)
SHARED_ROWS = 1 << 20  # a fixed-size shared table (Keras, TorchRec) indexes the salted keys mod this
FIELD_ROWS_CAP = 1 << 18  # a fixed-size per-field table of `wide` (Keras, TorchRec): min(vocabulary, this) rows
BOTTOM_MLP = (64,)
TOP_MLP = (64, 32)
