"""Sparse tables: the native embedding table (EmbeddingTable) with its settings (Table, Cache), sparse optimizers,
row initialisers, the key hash and the erasure codec, thin over the C++ core."""
