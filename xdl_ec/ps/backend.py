"""Where the roles run: :class:`LocalBackend` (objects in this process, the default) or :class:`RayBackend` (one Ray
actor per role). Both expose the same small interface:

- ``start(role, index, cls, *args, node=None)`` builds ``cls(*args)`` (on Ray node ``node`` when given) and returns a
  :class:`Handle`; ``nodes()`` lists the alive nodes (see :mod:`xdl_ec.ps.placement`);
- ``handle.call(method, *args)`` runs ``method`` on the object and returns a future-like (``result(timeout)``);
  calls to one handle run one at a time, in submission order, as a Ray actor runs them;
- ``kill(handle)`` ends the role with everything it held (Ray: the actor process is killed; local: the object is
  dropped), and ``alive(handle)`` probes it.

A call to a dead role raises :class:`ServerLost` or :class:`WorkerLost` naming role and index (Ray's
``ActorDiedError``/``RayActorError``, and ``ActorUnschedulableError`` for a role pinned to a node that died, are
translated here, including when they surface inside another actor), so the layers above never see a transport's
exception types.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import threading
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

from xdl_ec.ps.api import RoleAPI
from xdl_ec.ps.handle import Handle
from xdl_ec.ps.remote import Remote

DEFAULT_TIMEOUT = 300.0  # seconds a call may take before it counts as hung (a step is far shorter)
KILL_SECONDS = 30.0  # a killed actor that still answers after this long is an error


class KillTimeout(RuntimeError):
    """A killed role still answers ``KILL_SECONDS`` after the kill."""


class RoleLost(RuntimeError):
    """A role (server or worker) died or stopped answering; names the role and its index."""

    role = "role"

    def __init__(self, index: int, reason: str = "") -> None:
        self.index = int(index)
        self.reason = reason
        super().__init__(f"{self.role} {self.index} was lost" + (f": {reason}" if reason else ""))

    def __reduce__(self) -> tuple:  # picklable across Ray processes with its own arguments
        return (type(self), (self.index, self.reason))


class ServerLost(RoleLost):
    """A parameter server died (its process killed, or its object dropped)."""

    role = "server"


class WorkerLost(RoleLost):
    """A worker died."""

    role = "worker"


class CallTimeout(TimeoutError):
    """A call got no answer within its timeout: the role may be hung or dead (the scheduler decides)."""

    def __init__(self, role: str, index: int, method: str, seconds: Optional[float]) -> None:
        self.role, self.index, self.method = role, int(index), method
        self.seconds = None if seconds is None else float(seconds)
        within = "" if seconds is None else f" within {seconds:g} s"
        super().__init__(f"{role} {index} did not answer {method}(){within}")

    def __reduce__(self) -> tuple:
        return (type(self), (self.role, self.index, self.method, self.seconds))


LOST_ERRORS: Dict[str, Type[RoleLost]] = {"server": ServerLost, "worker": WorkerLost}


def in_ray_actor() -> bool:
    """True inside a Ray actor's process (never imports Ray when this process has not)."""
    import sys

    if "ray" not in sys.modules:
        return False
    import ray

    return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


def lost_error(role: str, index: int, reason: str) -> RoleLost:
    if role not in LOST_ERRORS:
        raise ValueError(f"role: must be one of {sorted(LOST_ERRORS)}, got {role!r}")
    return LOST_ERRORS[role](index, reason)


# ---- one process -------------------------------------------------------------------------------------
class LocalFuture:
    """A concurrent.futures.Future whose ``result`` raises CallTimeout instead of the stdlib TimeoutError."""

    def __init__(self, future: concurrent.futures.Future, handle: "LocalHandle", method: str) -> None:
        self._future, self._handle, self._method = future, handle, method

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: Optional[float] = DEFAULT_TIMEOUT) -> Any:
        try:
            return self._future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise CallTimeout(self._handle.role, self._handle.index, self._method, timeout) from None


class LocalHandle(Handle):
    """A role living in this process: its object plus one thread that runs its calls in order."""

    def __init__(self, role: str, index: int, obj: Any) -> None:
        self.role, self.index = role, index
        self._obj: Any = obj
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"xdl-ec-{role}{index}"
        )
        self._lock = threading.Lock()

    def _run(self, method: str, args: tuple) -> Any:
        obj = self._obj
        if obj is None:
            raise lost_error(self.role, self.index, "its object was dropped")
        try:
            return getattr(obj, method)(*args)
        finally:
            if getattr(obj, "crash_requested", False):  # an injected crash: the role dies right after answering
                self.drop()

    def call(self, method: str, *args: Any) -> LocalFuture:
        with self._lock:
            if self._obj is None:
                future: concurrent.futures.Future = concurrent.futures.Future()
                future.set_exception(lost_error(self.role, self.index, "its object was dropped"))
                return LocalFuture(future, self, method)
            return LocalFuture(self._executor.submit(self._run, method, args), self, method)

    def call_beside(self, method: str, *args: Any) -> LocalFuture:
        """Runs the call in the caller's thread, now: the method takes its own locks, so it need not queue behind
        the role's calls in flight (a rebuild's fragment reads would else wait out every step's pulls and pushes
        on each server, and hand the GIL over twice per read)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(self._run(method, args))
        except BaseException as err:  # noqa: BLE001 - the caller's result() raises it, as for call()
            future.set_exception(err)
        return LocalFuture(future, self, method)

    @property
    def alive(self) -> bool:
        return self._obj is not None

    def local_object(self) -> Any:
        """The role's object itself, for peers in this process that bypass the call thread (parity forwarding
        to a holder that has its own lock); the role's Lost error once it was dropped."""
        obj = self._obj
        if obj is None:
            raise lost_error(self.role, self.index, "its object was dropped")
        return obj

    def drop(self) -> None:
        """Drops the object with everything it held; queued and later calls raise the role's Lost error."""
        with self._lock:
            obj, self._obj = self._obj, None
        if obj is not None and hasattr(obj, "close"):
            obj.close()
        self._executor.shutdown(wait=False)


LOCAL_NODE = "local"


class LocalBackend:
    """Every role as a plain object in this process (each with its own call thread, so servers work in parallel:
    their batch calls release the GIL)."""

    name = "local"

    def __init__(self) -> None:
        self._handles: List[LocalHandle] = []

    def start(
        self, role: str, index: int, cls: Callable[..., Any], *args: Any, node: Optional[str] = None
    ) -> LocalHandle:
        lost_error(role, index, "")  # validates the role name
        if node not in (None, LOCAL_NODE):
            raise ValueError(f"node: the local backend has one node, {LOCAL_NODE!r}; got {node!r}")
        handle = LocalHandle(role, index, cls(*args))
        self._handles.append(handle)
        return handle

    def adopt(self, handle: Any) -> Any:
        """Roles of one process die with it: none is ever running to be taken over."""
        raise ValueError("adopt: a role of the local backend cannot outlive its driver")

    def share_code(self, functions: List[Any]) -> None:
        """Roles run in this process: they find every function where the caller does."""

    def nodes(self) -> List[str]:
        """This process is the one node."""
        return [LOCAL_NODE]

    def driver_node(self) -> str:
        return LOCAL_NODE

    def kill(self, handle: LocalHandle) -> None:
        handle.drop()

    def rename(self, handle: LocalHandle, index: int) -> LocalHandle:
        """The same role under another index (a spare server taking a dead one's place)."""
        handle.index = index
        return handle

    def alive(self, handle: LocalHandle, timeout: float = 5.0) -> bool:
        return handle.alive

    def seconds_since_death(self, handle: LocalHandle) -> Optional[float]:
        """Unknown here: an object in this process dies only by the job's own injection, which times itself."""
        return None

    def shutdown(self) -> None:
        for handle in self._handles:
            handle.drop()
        self._handles.clear()


# ---- Ray ---------------------------------------------------------------------------------------------
def _translate_ray_error(err: BaseException, role: str, index: int) -> BaseException:
    """The error a caller of (role, index) should see for a Ray exception ``err``."""
    import ray.exceptions as rex

    if isinstance(err, rex.RayTaskError):
        cause = getattr(err, "cause", None)
        if isinstance(cause, (RoleLost, CallTimeout)):
            return cause  # raised inside the actor (e.g. a worker that lost a server): keep its own naming
        if cause is not None:
            return cause
    if isinstance(err, (rex.ActorDiedError, rex.RayActorError, rex.ActorUnavailableError)):
        # Ray says why in its message; a whole node's death is worth naming (every role there went with it)
        where = "its Ray node died" if "node has died" in str(err) else "its Ray actor died"
        return lost_error(role, index, f"{where} ({type(err).__name__})")
    if isinstance(err, rex.ActorUnschedulableError):  # pinned to a node that is gone: it never ran
        return lost_error(role, index, f"its Ray actor could not be placed on its node ({type(err).__name__})")
    return err


def ray_runtime_env() -> Dict[str, Any]:
    """The runtime_env that makes Ray actors import xdl_ec exactly as this process does.

    Ray puts the driver's current directory first on every worker's sys.path unless the job has a working_dir;
    run from a source checkout that would import the source tree (without its compiled modules) instead of the
    installed or staged package. So the job gets an empty working_dir, and the driver's PYTHONPATH. A script's job
    gets the script's folder instead (:func:`ship_project`; Ray uploads a folder only for the whole job, at
    ``ray.init``: a caller that connected Ray itself passes it there)."""
    import tempfile

    project = _project_folder if _project_folder is not None and os.path.isdir(_project_folder) else None
    if project is not None:
        check_project_folder(project)

    global _EMPTY_WORKING_DIR
    if _EMPTY_WORKING_DIR is None:
        _EMPTY_WORKING_DIR = tempfile.mkdtemp(prefix="xdl-ec-ray-")
    # absolute: the actors run in that working_dir, where a relative entry would silently miss
    pythonpath = os.pathsep.join(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    env = {"PYTHONPATH": pythonpath, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    if project is not None:
        return {"working_dir": project, "excludes": list(PROJECT_EXCLUDES), "env_vars": env}
    return {"working_dir": _EMPTY_WORKING_DIR, "env_vars": env}


_EMPTY_WORKING_DIR: Optional[str] = None

#: the most a script's folder may hold to travel to Ray actors (Ray keeps it in its GCS, every node unpacks a copy);
#: past it, :func:`check_project_folder` says what to do
MAX_PROJECT_BYTES = 50 * 1000 * 1000
PROJECT_EXCLUDES = (".git", "__pycache__")  # neither counted nor shipped
_project_folder: Optional[str] = None


def project_folder_bytes(folder: str) -> int:
    """Bytes of the files under ``folder`` that would be shipped (symbolic links not followed)."""
    total = 0
    for parent, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in PROJECT_EXCLUDES]
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_size
            except OSError:  # gone while walking: not shipped either
                pass
    return total


def check_project_folder(folder: str) -> None:
    """ValueError when ``folder`` is too large to ship to Ray actors (:data:`MAX_PROJECT_BYTES`)."""
    size = project_folder_bytes(folder)
    if size > MAX_PROJECT_BYTES:
        raise ValueError(
            f"--script: its folder {folder} holds {size / 1e6:.1f} MB; on Ray the script's folder "
            f"travels to every actor, at most {MAX_PROJECT_BYTES / 1e6:.0f} MB: put the script and the "
            f"modules it imports in a folder of their own (data files can stay where they are, read by "
            f"absolute path)"
        )


def ship_project(folder: Optional[str]) -> None:
    """A Ray that :func:`connect_ray` starts or joins from now on runs the actors in a copy of ``folder`` (a script's:
    first on their sys.path, so the modules and packages beside the script import there as in the driver); None: no
    folder travels."""
    global _project_folder
    _project_folder = None if folder is None else os.path.abspath(folder)


class RayFuture:
    """An ObjectRef of one actor call; ``result`` is ``ray.get`` with a timeout and error translation."""

    def __init__(self, ref: Any, role: str, index: int, method: str) -> None:
        self.ref, self.role, self.index, self.method = ref, role, index, method

    def done(self) -> bool:
        import ray

        ready, _ = ray.wait([self.ref], timeout=0)
        return bool(ready)

    def result(self, timeout: Optional[float] = DEFAULT_TIMEOUT) -> Any:
        import ray
        import ray.exceptions as rex

        try:
            return ray.get(self.ref, timeout=timeout)
        except rex.GetTimeoutError:
            raise CallTimeout(self.role, self.index, self.method, timeout) from None
        except rex.RayError as err:
            raise _translate_ray_error(err, self.role, self.index) from None


BESIDE_GROUP = "beside"  # one thread per actor for Handle.call_beside


class RayHandle(Handle):
    """A role living in a Ray actor. Picklable (the actor handle is), so workers receive the servers' handles."""

    def __init__(self, role: str, index: int, actor: Any, node: Optional[str] = None) -> None:
        self.role, self.index, self.actor, self.node = role, index, actor, node

    def call(self, method: str, *args: Any) -> RayFuture:
        return RayFuture(getattr(self.actor, method).remote(*args), self.role, self.index, method)

    def call_beside(self, method: str, *args: Any) -> RayFuture:
        """Runs in the actor's ``beside`` concurrency group: its own thread, not queued behind pushes and pulls."""
        ref = getattr(self.actor, method).options(concurrency_group=BESIDE_GROUP).remote(*args)
        return RayFuture(ref, self.role, self.index, method)


def use_ray_token() -> None:
    """This process speaks Ray's token authentication (a Ray that xdl-ec starts requires it), unless the caller set
    RAY_AUTH_MODE."""
    if "RAY_AUTH_MODE" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = "token"
        try:  # Ray read the mode when it was imported: have this process see token mode too, as Ray does
            from ray._raylet import Config  # type: ignore[attr-defined]  # Ray's own, untyped

            Config.initialize("")
        except ImportError:  # a Ray without token authentication: nothing to refresh
            pass


def connect_ray(address: Optional[str] = None, num_cpus: Optional[int] = None, namespace: Optional[str] = None) -> None:
    """``ray.init`` as the Ray backend wants it (a local Ray of ``num_cpus``, default every core, when ``address``
    is None). A caller that connects first keeps Ray up across several clusters: a backend stops only the Ray it
    started itself. ``namespace``: where this driver's named actors live (a reattachable run's, derived from its
    run dir)."""
    import ray

    kwargs: Dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if namespace is not None:
        kwargs["namespace"] = namespace
    if "RAY_LOGGER_LEVEL" not in os.environ:  # Ray's INFO lines (started, package pushed) unless the user asked
        kwargs["logging_level"] = "warning"
    if address is None:
        # A Ray xdl-ec starts requires Ray's token (Ray 2.52+ makes one for a local start, ~/.ray/auth_token),
        # unless the caller set RAY_AUTH_MODE: a user's cluster (address given) keeps the user's setting.
        use_ray_token()
        kwargs["num_cpus"] = num_cpus if num_cpus is not None else os.cpu_count()
        # Ray prestarts a task worker per CPU for the first driver; every role here is an actor with a process
        # of its own, so those idle workers only cost CPU (measured ~1% of a Ray step's on 2 cores)
        # and Ray starts its workers at nice 15 (worker_niceness), under which the roles, the job's own training
        # process included, got a fraction of the CPU one process at nice 0 gets on a busy machine: a Ray worker's TF
        # step ran 2x one process's beside other load (docs/results/table-groups-ray-2026-12-07.md)
        kwargs["_system_config"] = {"prestart_worker_first_driver": False, "worker_niceness": 0}
    previous = signal.getsignal(signal.SIGTERM)
    # "local", not None: None would join the newest Ray started on this machine (another run's --run-dir head),
    # and refuse num_cpus there with an error about connecting that no flag of ours explains
    ray.init(address="local" if address is None else address, runtime_env=ray_runtime_env(), **kwargs)
    # ray.init puts its own SIGTERM handler in (exit status 1, no clean stop): a handler the caller installed (xdl-ec
    # train stops on SIGTERM as on SIGINT) stays in charge; the Ray it started is shut down as after a SIGINT
    if callable(previous) and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous)
    warn_if_unauthenticated_cluster()


_warned_unauthenticated = False


def warn_if_unauthenticated_cluster() -> bool:
    """Warns once per process when the connected Ray cluster spans several nodes without Ray's token
    authentication: anyone who reaches its ports can then run code in it (the job's parity secret travels in actor
    arguments). Returns whether it warned now."""
    global _warned_unauthenticated
    import ray

    if _warned_unauthenticated or not ray.is_initialized():
        return False
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled

        token = bool(is_token_auth_enabled())
    except ImportError:  # a Ray without token authentication (before 2.52)
        token = False
    nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
    if token or nodes <= 1:
        return False
    _warned_unauthenticated = True
    warnings.warn(
        f"the Ray cluster has {nodes} nodes and no authentication: anyone who can reach its ports can run "
        f"code in it. Start it with RAY_AUTH_MODE=token (Ray 2.52+; see README 'Security') and set it here "
        f"too",
        RuntimeWarning,
        stacklevel=3,
    )
    return True


class RayBackend:
    """Every role as a Ray actor (``num_cpus=0``: roles are I/O- and TF-bound processes, not Ray tasks to pack;
    no restarts: a dead role is reported, fault tolerance decides what to do). ``address=None`` starts a local
    Ray when none is running; ``ray.init`` is skipped when this process is already connected."""

    name = "ray"

    def __init__(self, address: Optional[str] = None, num_cpus: Optional[int] = None, detached: bool = False) -> None:
        """``detached``: roles outlive this driver's Ray job (a reattachable run's, docs/design/reattach.md: its run
        head ends them once the grace has passed)."""
        import ray

        self.detached = detached
        self._started_ray = False
        if not ray.is_initialized():
            connect_ray(address, num_cpus)
            self._started_ray = True
        self._handles: List[RayHandle] = []

    def start(
        self, role: str, index: int, cls: Callable[..., Any], *args: Any, node: Optional[str] = None
    ) -> RayHandle:
        """``node``: a Ray node id (of :meth:`nodes`) the actor must run on; it fails (as the role's Lost error at
        its first call) rather than run elsewhere, since placement decided what a node's death may take."""
        import ray

        lost_error(role, index, "")
        actor_cls = ray.remote(
            num_cpus=0,
            max_restarts=0,
            max_task_retries=0,  # type: ignore[call-overload]
            concurrency_groups={BESIDE_GROUP: 1},
        )(cls)  # Ray's stubs lack concurrency_groups
        if self.detached:
            actor_cls = actor_cls.options(lifetime="detached")
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            actor_cls = actor_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
        handle = RayHandle(role, index, actor_cls.remote(*args), node)
        self._handles.append(handle)
        return handle

    def adopt(self, handle: RayHandle) -> RayHandle:
        """A role started by an earlier driver of this run (detached), now this backend's to call and to stop."""
        self._handles.append(handle)
        return handle

    def nodes(self) -> List[str]:
        """The ids of the Ray cluster's alive nodes, sorted (so a placement over them is reproducible)."""
        import ray

        return sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))

    def driver_node(self) -> str:
        """The id of the Ray node this process (the driver) is attached to."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def share_code(self, functions: List[Any]) -> None:
        """Makes the modules that define ``functions`` travel with them (pickled by value): a job script, or a
        module beside it, is not importable in the actors' processes (their working directory is empty, see
        :func:`ray_runtime_env`). Installed packages (site-packages) and xdl_ec itself stay pickled by name."""
        import sys
        import sysconfig

        from ray import cloudpickle

        installed = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
        for fn in functions:
            module = sys.modules.get(str(getattr(fn, "__module__", None) or getattr(type(fn), "__module__", "")))
            path = getattr(module, "__file__", None)
            if (
                module is None
                or path is None
                or module.__name__ in ("__main__",)
                or module.__name__.split(".")[0] == "xdl_ec"
                or any(path.startswith(p) for p in installed)
            ):
                continue
            cloudpickle.register_pickle_by_value(module)

    def rename(self, handle: RayHandle, index: int) -> RayHandle:
        """The same actor under another index (a spare server taking a dead one's place)."""
        renamed = RayHandle(handle.role, index, handle.actor, handle.node)
        self._handles.append(renamed)
        return renamed

    def kill(self, handle: RayHandle) -> None:
        """Kills the actor's process (SIGKILL semantics: nothing it held survives) and returns once it is gone:
        ``ray.kill`` only asks, so a call sent right after it (a step's, over a direct link) could still be served,
        and an injected kill would then miss the step it was meant for. Ray calls the actor dead within
        milliseconds while its process lives on for up to a second (measured under load: 0.03-1.0 s) and serves
        its direct links meanwhile (a worker "killed before step t" trained step t, and its retry applied that
        step's pushes twice), so on this machine's node the wait is for the process itself; on another node
        Ray's word is what there is."""
        import ray

        if handle.actor is None:  # a LostHandle (kept_handle.py): lost before this driver read its run's record
            return
        process = _local_process(handle)  # asked before the kill
        ray.kill(handle.actor, no_restart=True)
        deadline = time.monotonic() + KILL_SECONDS
        while self.alive(handle, 1.0) or (process is not None and _process_running(*process)):
            if time.monotonic() > deadline:
                raise KillTimeout(f"{handle.role} {handle.index} still runs {KILL_SECONDS:g} s after ray.kill")
            time.sleep(0.005)

    def alive(self, handle: RayHandle, timeout: float = 5.0) -> bool:
        """True when the actor answers a ping within ``timeout``."""
        try:
            Remote(handle, RoleAPI).ping().result(timeout)
            return True
        except (RoleLost, CallTimeout):
            return False

    def seconds_since_death(self, handle: RayHandle) -> Optional[float]:
        """Seconds since Ray recorded the actor's death (its GCS entry's end time: a kill from outside the job is
        timed from the kill, not from the call that failed), or None when Ray does not say."""
        if handle.actor is None:  # a LostHandle: dead before this driver, when is not known
            return None
        info = actor_entry(handle.actor._actor_id.hex())
        if info.get("State") != "DEAD" or not info.get("EndTime"):
            return None
        return max(time.time() - float(info["EndTime"]) / 1000.0, 0.0)

    def shutdown(self) -> None:
        import ray

        for handle in self._handles:
            try:
                ray.kill(handle.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self._handles.clear()
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False


def wait_first(futures: List[Any], timeout: Optional[float] = DEFAULT_TIMEOUT) -> List[Any]:
    """The futures of ``futures`` that are done, waiting up to ``timeout`` for at least one (all of one backend)."""
    if not futures:
        return []
    if isinstance(futures[0], RayFuture):
        import ray

        ready, _ = ray.wait([f.ref for f in futures], num_returns=1, timeout=timeout)
        ready_ids = {r.hex() for r in ready}
        return [f for f in futures if f.ref.hex() in ready_ids]
    concurrent.futures.wait(
        [f._future for f in futures], timeout=timeout, return_when=concurrent.futures.FIRST_COMPLETED
    )
    return [f for f in futures if f.done()]


def make_backend(name: str, address: Optional[str] = None, detached: bool = False) -> Any:
    """``local`` or ``ray`` (``address``: an existing Ray cluster; None starts a local one; ``detached``: roles
    outlive the driver, see :class:`RayBackend`)."""
    if name == "local":
        if address is not None or detached:
            raise ValueError("address, detached: only the ray backend takes a Ray address or outlives its driver")
        return LocalBackend()
    if name == "ray":
        return RayBackend(address, detached=detached)
    raise ValueError(f"backend: must be 'local' or 'ray', got {name!r}")


def actor_entry(actor_id: str) -> Dict[str, Any]:
    """Ray's GCS actor table entry of the actor of hex id ``actor_id`` (State, Pid, Address, StartTime, EndTime), {}
    when Ray does not say: a private API (the public state API needs the dashboard), whose absence is no error."""
    try:
        import ray._private.state

        return dict(ray._private.state.actors(actor_id) or {})
    except Exception:  # noqa: BLE001 - a private API: what it would say is unknown, not an error
        return {}


def _local_process(handle: RayHandle) -> Optional[Tuple[int, bytes]]:
    """(pid, start in clock ticks after boot) of ``handle``'s actor's process when it runs on this process's node,
    else None (unknown, or elsewhere). A process of that pid started after Ray started the actor is another one
    (pids wrap at 32768 here): None too, as the actor's is gone."""
    try:
        import ray

        info = actor_entry(handle.actor._actor_id.hex())
        node = (info.get("Address") or {}).get("NodeID")
        pid = int(info.get("Pid") or 0)
        actor_start = float(info.get("StartTime") or 0) / 1000.0
        here = ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - a private API: without it the kill waits as Ray says, as on another node
        return None
    if pid <= 0 or node != here:
        return None
    ticks = _start_ticks(pid)
    try:
        with open("/proc/stat", "rb") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith(b"btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    # 1 s: btime and the ticks are coarse
    if ticks is None or boot + int(ticks) / os.sysconf("SC_CLK_TCK") > actor_start + 1.0:
        return None
    return pid, ticks


def _start_ticks(pid: int) -> Optional[bytes]:
    """Process ``pid``'s start (field 22 of its stat, clock ticks after boot) while it runs; None once it is gone
    (a zombie serves nothing: gone too)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return None if len(fields) < 20 or fields[0] == b"Z" else fields[19]


def _process_running(pid: int, ticks: bytes) -> bool:
    """Whether the process ``pid`` that started at ``ticks`` still runs (a later process of the pid is another)."""
    return _start_ticks(pid) == ticks
