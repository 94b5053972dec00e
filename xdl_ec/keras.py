"""``xdl_ec.keras``: the Keras 3 layer over an xdl-ec table (implemented in :mod:`xdl_ec.tf.keras_layer`)."""

from xdl_ec.tf.keras_layer import SparseEmbedding

__all__ = ["SparseEmbedding"]
