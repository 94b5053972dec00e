"""``xdl-ec plan``: servers, stripe code, memory per server and strategy for a job (its logic in :mod:`xdl_ec.plan`)."""

from __future__ import annotations

import argparse
import json
from typing import Dict, List, Optional

from xdl_ec.cli.parser import UsageError
from xdl_ec.settings.flag_types import positive_float, positive_int


def add_plan_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan",
        help="size a job: servers, code (k, r), memory per server, and the fault-tolerance strategy to use",
        description="Plan a job from its tables' rows, widths and optimizers and its servers' RAM, disk and MTBF, "
        "with constants an 'xdl-ec bench --sweep-mtbf' run measured (the shipped ones by default).",
    )
    p.add_argument(
        "--rows",
        action="append",
        required=True,
        metavar="N | TABLE=N",
        help="rows of the table (one --rows N with --dim and --optimizer), or with --script the rows of each of "
        "its tables (repeat --rows TABLE=N)",
    )
    p.add_argument("--script", metavar="FILE.py", help="take the tables (dims, optimizers) from a script's job()")
    p.add_argument("--dim", type=positive_int, help="embedding width of the --rows table (default 16)")
    p.add_argument("--optimizer", help="sparse optimizer of the --rows table (default adagrad)")
    p.add_argument(
        "--memory-per-server", required=True, metavar="SIZE", help="RAM a server may use for its tables, e.g. 64G"
    )
    p.add_argument(
        "--disk-per-server", metavar="SIZE", help="disk a server may use for the disk tier's spill file, e.g. 1T"
    )
    p.add_argument(
        "--mtbf", required=True, metavar="DURATION", help="mean time between failures of one server, e.g. 14h"
    )
    p.add_argument(
        "--samples-per-sec",
        type=positive_float,
        metavar="RATE",
        help="the job's training rate without failures (default: the measured job's)",
    )
    p.add_argument(
        "--max-servers", type=positive_int, default=1000, metavar="N", help="most servers to consider (1000)"
    )
    p.add_argument("--constants", metavar="PATH", help="plan-constants.json of a bench sweep (default: shipped)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(handler=run_plan)


def table_rows(values: List[str], names: Optional[List[str]]) -> Dict[str, int]:
    """``--rows`` values as {table: rows}; ``names``: the script's tables (None: one unnamed table)."""
    if names is None:
        if len(values) != 1 or "=" in values[0]:
            raise UsageError("--rows: without --script give one --rows N (the rows of the one table)")
        return {"table": _count(values[0], "--rows")}
    out: Dict[str, int] = {}
    for value in values:
        name, sep, count = value.partition("=")
        if not sep:
            raise UsageError(f"--rows: with --script give TABLE=N for each table ({', '.join(names)}), got {value!r}")
        if name not in names:
            raise UsageError(f"--rows: the script has no table {name!r}; its tables: {', '.join(names)}")
        if name in out:
            raise UsageError(f"--rows: table {name!r} given twice; give each table's rows once")
        out[name] = _count(count, f"--rows {name}")
    missing = [n for n in names if n not in out]
    if missing:
        raise UsageError(f"--rows: give the rows of every table; missing: {', '.join(missing)} (TABLE=N each)")
    return out


def _count(text: str, flag: str) -> int:
    cleaned = text.replace("_", "").replace(",", "").strip()
    try:
        value = int(cleaned) if cleaned.isdigit() or cleaned.startswith("-") else int(float(cleaned))
    except ValueError:
        raise UsageError(f"{flag}: expected a whole number of rows like 1000000 or 1e9, got {text!r}") from None
    if value < 1 or (not cleaned.lstrip("-").isdigit() and float(cleaned) != value):
        raise UsageError(f"{flag}: expected a positive whole number of rows, got {text!r}")
    return value


def run_plan(args: argparse.Namespace) -> int:
    from xdl_ec.plan.job_plan import JobPlan, PlanRequest
    from xdl_ec.plan.measured_constants import MeasuredConstants
    from xdl_ec.plan.row_layout import RowLayout
    from xdl_ec.plan.units import duration_seconds, size_bytes

    try:
        memory = size_bytes("--memory-per-server", args.memory_per_server)
        disk = None if args.disk_per_server is None else size_bytes("--disk-per-server", args.disk_per_server)
        mtbf = duration_seconds("--mtbf", args.mtbf)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if args.script is not None:
        from xdl_ec.job.job_source import load_script_job

        for flag, value in (("--dim", args.dim), ("--optimizer", args.optimizer)):
            if value is not None:
                raise UsageError(f"{flag}: the script's tables declare it; drop {flag} with --script")
        tables = load_script_job(args.script).spec.tables
        layouts = {t.name: RowLayout.of_table(t) for t in tables}
        rows = table_rows(args.rows, [t.name for t in tables])
    else:
        rows = table_rows(args.rows, None)
        try:
            layouts = {"table": RowLayout.of(args.dim or 16, args.optimizer or "adagrad")}
        except ValueError as err:
            text = str(err).removeprefix("table 'layout': ")
            flag = "--dim" if text.startswith("dim") else "--optimizer"
            raise UsageError(f"{flag}: {text.split(': ', 1)[-1]}") from None
    try:
        constants = MeasuredConstants.load(args.constants)
        request = PlanRequest(rows, layouts, memory, mtbf, disk, args.samples_per_sec, args.max_servers)
        plan = JobPlan(request, constants)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if args.json:
        print(json.dumps(plan.to_json(), indent=1, sort_keys=True))
    else:
        print("\n".join(plan.text()))
    return 0
