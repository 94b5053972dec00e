"""Keeping a run: shard and job checkpoints, saves of a whole run (written and opened) and the backstop's
incremental saves."""
