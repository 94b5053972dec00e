"""``xdl-ec plan``: how many servers, which stripe code, how much memory per server and which fault-tolerance
strategy for a job, from constants the bench measured (:mod:`~xdl_ec.plan.measured_constants`).

:mod:`~xdl_ec.plan.memory_model` sizes a server, :mod:`~xdl_ec.plan.overhead_model` prices a strategy at a
failure rate, :mod:`~xdl_ec.plan.job_plan` puts them together into the recommendation."""
