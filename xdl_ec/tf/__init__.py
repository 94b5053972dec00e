"""TensorFlow glue over sparse tables: the lookup and gradient ops, the Keras layer, tables as TF trackables, and
TensorFlow's determinism switches."""
