"""Soak: SIGKILLs at a seeded rate on servers, workers and the driver of a run trained under ``ec`` with a backstop,
and beside it the failure-free twin over the same input (in one process); writes the result as JSON (issue #51).
Not a test.

    PYTHONPATH=build/stage python3 -P bench/soak.py --minutes 60 --backend ray --seed 1 --json soak.json
        [--kill-every 20] [--servers 3] [--code 2,1] [--batch-size 256] [--leak-grace 60] [--workdir DIR]

``--minutes``: the failure-free run's length on ``--backend`` (the soak itself takes longer: restarts and re-trained
steps; the one-process twin beside it, as long or shorter, slows it on a small machine). The
JSON: ``{"kills": {"server", "worker", "driver"}, "digest_equal", "lost_samples", "hung", "leaked_processes",
"recovery_s": {role: [median, max]}}``, ``reattached`` (driver restarts that reattached to the run's roles: Ray,
whose run has a ``--run-dir``), ``steps_retrained`` (steps the other restarts trained again from the backstop),
``not_reattached`` (why each of those did not) and what it ran (``twin_backend``: local; see
:mod:`xdl_ec.benchmark.soak`).
"""

from __future__ import annotations

import argparse
import json

from xdl_ec.benchmark.soak import Soak, SoakPlan, write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, required=True, help="the failure-free run's length in minutes")
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", required=True, metavar="OUT", help="where the result goes")
    parser.add_argument("--kill-every", type=float, default=20.0, help="seconds between kills on average")
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--code", default="2,1", help="K,R")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--leak-grace", type=float, default=60.0, help="seconds a dead run's processes may take")
    parser.add_argument("--workdir", help="where the saves go (default: a fresh temporary directory)")
    args = parser.parse_args()
    k, r = (int(x) for x in args.code.split(","))
    plan = SoakPlan(
        minutes=args.minutes,
        backend=args.backend,
        seed=args.seed,
        kill_every=args.kill_every,
        servers=args.servers,
        code=(k, r),
        batch_size=args.batch_size,
        leak_grace=args.leak_grace,
    )
    result = Soak(plan, args.workdir).run()
    write_result(result, args.json)
    print(json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
