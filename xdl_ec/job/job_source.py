"""Where a job comes from, so a save can name it and :func:`xdl_ec.load` / ``xdl-ec export`` rebuild it unasked:
a script (``xdl-ec train --script FILE.py``: its ``job()``) or the built-in model (its
:class:`~xdl_ec.builtin.criteo_job.TrainConfig`). A job built in the user's own Python has no source: give it to
:func:`xdl_ec.load` as ``job=``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Dict, Optional

from xdl_ec.job.job import Job
from xdl_ec.job.user_frame import users_line
from xdl_ec.sparse.row_rules import rules_of

#: the built-in job's factory (``xdl-ec train`` without --script), called with its saved description
BUILTIN_FACTORY = "xdl_ec.builtin.criteo_job:job_from_description"


class ScriptError(ValueError):
    """A --script that cannot give a job."""


def load_script_job(path: str, table_rules: Optional[Dict[str, Any]] = None) -> Any:
    """Imports the file at ``path`` and returns what its ``job()`` returns, checked to be an xdl_ec.Job; the job's
    ``source`` names the script. ``table_rules``: the command line's table flags ({"admit_min_count": N, ...}, as
    :func:`xdl_ec.sparse.row_rules.rules_of` takes them), the rules of every table that declares none; the source
    keeps them, so a save's job is rebuilt with them.

    A script is a project: its folder goes first on ``sys.path`` (as ``python FILE.py`` would put it), so the modules
    and packages beside it import, and on Ray that folder travels to the actors (:func:`xdl_ec.ps.backend.ship_project`,
    bounded by ``MAX_PROJECT_BYTES``)."""
    from xdl_ec.ps.backend import ship_project

    file = Path(path)
    if not file.is_file():
        raise ScriptError(f"--script: no such file: {path}")
    folder = str(file.resolve().parent)
    if not sys.path or sys.path[0] != folder:
        sys.path.insert(0, folder)
    ship_project(folder)
    spec = importlib.util.spec_from_file_location(f"xdl_ec_script_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise ScriptError(f"--script {path}: Python cannot import it as a module (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pickling the job's functions (Ray) finds them by module name
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - user code: one line naming the file and the error
        raise ScriptError(f"--script {path}: importing it raised {type(err).__name__}: {err}") from None
    make = getattr(module, "job", None)
    if not callable(make):
        raise ScriptError(f"--script {path}: defines no job() function (it must return an xdl_ec.Job)")
    try:
        job = make()
    except Exception as err:  # noqa: BLE001
        # the line of the user's code it came from (the script's, or a module of theirs), else the innermost
        frames = traceback.extract_tb(err.__traceback__)
        where = users_line(frames) or f"{frames[-1].filename}:{frames[-1].lineno}"
        said = str(err)
        at = "" if said.startswith(where) else f" (at {where})"  # an XdlPortError starts with it already
        raise ScriptError(f"--script {path}: job() raised {type(err).__name__}: {said}{at}") from None
    if not isinstance(job, Job):
        raise ScriptError(f"--script {path}: job() must return an xdl_ec.Job, got {type(job).__name__}")
    if table_rules:
        try:
            job.spec = job.spec.with_default_rules(**rules_of(**table_rules))
        except (TypeError, ValueError) as err:
            raise ScriptError(f"--script {path}: the table flags do not fit its tables: {err}") from None
    job.source = script_source(path, table_rules)
    return job


def script_source(path: str, table_rules: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    source: Dict[str, Any] = {"script": os.path.abspath(path)}
    if table_rules:
        source["table_rules"] = dict(table_rules)
    return source


def builtin_source(config: Any) -> Dict[str, Any]:
    return {"builtin": config.describe()}


def job_of(source: Optional[Dict[str, Any]], where: str) -> Any:
    """The job ``source`` names (``where``: the save it was read from, for errors)."""
    if not source:
        raise ValueError(
            f"{where}: the job that saved it was built in Python (it names no script): pass it, "
            f"xdl_ec.load(DIR, job=make_job()) / xdl-ec export --script FILE.py"
        )
    if "script" in source:
        return load_script_job(source["script"], source.get("table_rules"))
    if "builtin" in source:
        # the built-in job sits above this room (it is written against the job API): named, not imported
        module, _, factory = BUILTIN_FACTORY.partition(":")
        job = getattr(importlib.import_module(module), factory)(source["builtin"])
        job.source = dict(source)
        return job
    raise ValueError(f"{where}: names its job as {source!r}, which this xdl-ec cannot rebuild")
