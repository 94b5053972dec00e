"""Settings checked once: the validators every user-facing setting goes through, the base of hyper-parameters and
the N|Ns interval form. The floor of the package: imports nothing of xdl_ec."""
