"""Worker pools for the batch dispatcher. This is the only module of livefuse that imports Ray.

* :class:`RayPool`: Ray actors, each a :class:`~livefuse.batch.worker.BatchWorker` that builds
  its engine once and keeps its models. With no ``address`` an embedded local cluster is started
  for the command and stopped after it (dashboard off, a small object store, token
  authentication kept on); ``address='auto'`` or ``HOST:PORT`` joins a running cluster, which is
  left running. ``gpus_per_worker`` may be fractional: 0.25 puts four engines, and so four
  encoders, on one GPU; Ray sets each actor's ``CUDA_VISIBLE_DEVICES``.
* :class:`LocalPool`: the same workers as threads of this process, without Ray (the fallback when
  Ray is not installed, and a way to run several engines on one GPU from one process).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from livefuse.batch.dispatch import GpuKey, WorkerLost, worker_names
from livefuse.batch.plan import Unit
from livefuse.batch.worker import BatchWorker, UnitResult, WorkerInfo, WorkerStats
from livefuse.errors import LivefuseError
from livefuse.extras import install_hint
from livefuse.io.video import VideoOptions

OBJECT_STORE_BYTES = 256 * 2**20
"""The embedded cluster's object store: units and results are a few hundred bytes each (frames
never travel through Ray: workers read and write files), so Ray's default of 30 % of RAM would
only take memory from the engines."""
STOP_TIMEOUT_S = 30.0
KILL_GRACE_S = 2.0
"""How long a cancelled worker on this machine has to end by Ray's own ``ray.kill`` before it is
killed by its pid (on 2 cores Ray ended both of two workers well within it)."""


def ray_available() -> bool:
    """Whether Ray can be imported (the ``batch`` extra)."""
    return importlib.util.find_spec("ray") is not None


def _cuda_key(device: str) -> GpuKey | None:
    if not device.startswith("cuda"):
        return None
    return "local", device.partition(":")[2] or "0"


class LocalPool:
    """Workers as threads of this process (no Ray).

    Args:
        factory: builds one engine (called once per worker, on its thread).
        video: video options.
        workers: engines side by side; on one GPU each has its own CUDA streams and encoder, and
            PyAV, OpenCV and torch release the GIL while they work.
        why: why the items run in this process, for the description (``no Ray``,
            ``--executor local``).
    """

    def __init__(self, factory: Callable[[], Any], video: VideoOptions | None = None,
                 workers: int = 1, why: str = "no Ray") -> None:
        self.workers = {n: BatchWorker(factory, video, n) for n in worker_names(max(1, workers))}
        self._threads = cf.ThreadPoolExecutor(max_workers=len(self.workers),
                                              thread_name_prefix="livefuse-batch")
        self._units: dict[Hashable, tuple[str, Unit]] = {}
        self.description = (f"in-process: {len(self.workers)} worker thread"
                            f"{'s' if len(self.workers) > 1 else ''} ({why})")

    def names(self) -> list[str]:
        return list(self.workers)

    def prepare(self) -> None:
        """Build every worker's engine now, one after another (model loading in several
        threads at once gains little and shares one device).

        Raises:
            LivefuseError: the engine cannot be built (a missing model, no face in the source).
        """
        for w in self.workers.values():
            self._threads.submit(_build, w).result()

    def submit(self, worker: str, unit: Unit) -> Hashable:
        fut = self._threads.submit(self.workers[worker].run, unit)
        self._units[fut] = (worker, unit)
        return fut

    def wait(self, handles: Sequence[Hashable], timeout: float) -> list[Hashable]:
        done, _ = cf.wait(handles, timeout, return_when=cf.FIRST_COMPLETED)  # type: ignore[arg-type]
        return list(done)

    def result(self, handle: Hashable) -> UnitResult:
        self._units.pop(handle)
        assert isinstance(handle, cf.Future)
        try:
            res: UnitResult = handle.result()
        except Exception as exc:  # Cancelled by a stop, or a bug outside run()'s own handling
            raise WorkerLost(f"{type(exc).__name__}: {exc}") from exc
        return res

    def gpu(self, worker: str) -> GpuKey | None:
        return _cuda_key(self.workers[worker].device())

    def mem_info(self, worker: str) -> tuple[int, int] | None:
        return self.workers[worker].mem_info()

    def frames_done(self) -> int:
        return sum(w.frames_done() for w in self.workers.values())

    def stats(self) -> list[WorkerStats]:
        return [w.stats() for w in self.workers.values()]

    def cancel(self) -> None:
        for w in self.workers.values():
            w.cancel.set()
        self._threads.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        self._threads.shutdown(wait=True)


def _build(worker: BatchWorker) -> None:
    worker.engine  # noqa: B018  (the property builds it)


class _RayWorker(BatchWorker):
    """A BatchWorker inside a Ray actor: it reads the GPUs Ray gave it and its node."""

    def __init__(self, factory: Callable[[], Any], video: VideoOptions | None, name: str,
                 cpus: float | None) -> None:
        import ray

        gpu_ids = tuple(str(g) for g in ray.get_gpu_ids())
        node = ray.get_runtime_context().get_node_id()
        super().__init__(factory, video, name, gpu_ids, node, cpus)

    def prepare(self) -> str:
        """Build the engine now; its device."""
        return str(getattr(self.engine.renderer, "device", "cpu"))


def start_ray(address: str | None = None, num_cpus: float | None = None,
              num_gpus: float | None = None,
              object_store_bytes: int = OBJECT_STORE_BYTES) -> bool:
    """Connect to Ray, starting an embedded local cluster when ``address`` is ``None``.

    An embedded cluster runs with the dashboard off, :data:`OBJECT_STORE_BYTES` of object
    store, token authentication on (Ray's default for a new local cluster;
    ``RAY_AUTH_MODE=token`` keeps it and silences the notice), and its session folder (sockets,
    logs, spilled objects) in a temporary folder of its own that :func:`stop_ray` removes (Ray
    keeps every session's in ``/tmp/ray``: 406 of them, 87 MB, had piled up on this project's
    test machine). Ray's processes still listen on every interface, so the token is what keeps
    other machines out. ``num_cpus`` and ``num_gpus`` override what Ray detects (tests: a fake
    two-GPU node on the CPU).

    Returns:
        ``True`` when this call started the cluster (the caller stops it with :func:`stop_ray`);
        ``False`` when Ray was already connected or a running cluster was joined.

    Raises:
        LivefuseError: Ray is not installed, or the cluster cannot be reached.
    """
    if not ray_available():
        raise LivefuseError(f"Ray is not installed: {install_hint('batch')}")
    if address is None and "ray" not in sys.modules:
        # read once, when Ray is imported: set later, the driver and the cluster it starts
        # would disagree about the token
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    import ray

    if address is not None and address != "auto":
        _answers(address)
    if ray.is_initialized():
        return False
    common: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR,
                              "include_dashboard": False}
    main = threading.current_thread() is threading.main_thread()
    started = time.time()
    # Ray's driver installs a C-level SIGTERM handler that aborts the process (exit -6, no
    # clean-up): the CLI's own handler (clean up, exit 143) is put back after ray.init
    sigterm = signal.getsignal(signal.SIGTERM) if main else None
    # a Ctrl-C that lands in a fork's after-hook while Ray spawns its processes (logging's lock
    # release) is printed as "Exception ignored" and lost: a new user's batch then ran to the
    # end and exited 0. The handler notes each one, and a noted one is raised once init returns
    sigint = signal.getsignal(signal.SIGINT) if main else None
    noted: list[int] = []

    def note(signum: int, frame: object) -> None:
        noted.append(signum)
        raise KeyboardInterrupt

    if sigint is signal.default_int_handler:
        signal.signal(signal.SIGINT, note)
    mine: list[str] = []  # this call's session folder (not another cluster's of this process)
    try:
        if address is not None:
            ray.init(address=address, **common)
            if noted:
                raise KeyboardInterrupt
            return False
        mine.append(tempfile.mkdtemp(prefix="livefuse-ray-", dir=_session_root()))
        ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus,  # type: ignore[arg-type]
                 object_store_memory=object_store_bytes, _node_ip_address="127.0.0.1",
                 _temp_dir=mine[0], **common)
        if noted:
            raise KeyboardInterrupt
        _SESSION_DIRS.extend(mine)
        _STARTED[:] = [min([started, *_STARTED])]
    except (ConnectionError, RuntimeError, ValueError) as exc:
        _remove_session_dirs(mine)
        where = f"--address {address}" if address else "the embedded Ray cluster"
        raise LivefuseError(f"{where}: {exc}") from exc
    except BaseException as exc:
        # Ctrl-C or SIGTERM while the cluster was starting: its processes may be up already
        # (a new user's Ctrl-C 3 s in left Ray's agents running for a minute), and Ray's own
        # SIGTERM handler ends the process with a bare exit 15
        if address is None:
            # ray.shutdown does not know a node whose start it did not finish: its agents
            # stayed for a minute (until they noticed the raylet gone)
            _kill_and_wait(_ray_processes_since(started), 5.0)
            with contextlib.suppress(Exception):
                ray.shutdown()
            _remove_session_dirs(mine)
        if isinstance(exc, SystemExit) and exc.code == signal.SIGTERM and callable(sigterm):
            signal.signal(signal.SIGTERM, sigterm)
            sigterm(signal.SIGTERM, None)  # the CLI's: raises its own, which cleans up
        raise
    finally:
        if main and sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
        if sigint is signal.default_int_handler:
            signal.signal(signal.SIGINT, sigint)
    return True


def _answers(address: str) -> None:
    """Refuse a ``HOST:PORT`` where nothing listens: ``ray.init`` retried it for minutes, with
    Ray's C++ warnings for output (a new user's ``--address 127.0.0.1:1``).

    Raises:
        LivefuseError: not ``HOST:PORT``, or no connection within 5 s.
    """
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise LivefuseError(f"--address {address}: give auto or HOST:PORT of a running cluster "
                            "(`ray start --head` prints it)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5.0) as conn:
            grpc = _speaks_http2(conn)
    except OSError as exc:
        raise LivefuseError(f"--address {address}: nothing answers there "
                            f"({exc.strerror or exc}); is the cluster running (`ray status` on "
                            "its head machine)?") from exc
    if not grpc and os.environ.get("RAY_USE_TLS", "0").lower() in ("0", "false", ""):
        # ray.init waited on such a peer for minutes, printing Ray's C++ warnings (a new
        # user's --address at a web server's port)
        raise LivefuseError(f"--address {address}: something answers there, but not Ray (its "
                            "GCS speaks gRPC); the dashboard's port (8265) is not the one: "
                            "give the address `ray start --head` prints (port 6379 unless "
                            "changed)")


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""An HTTP/2 client's connection preface and an empty SETTINGS frame (RFC 9113 §3.4, §6.5)."""


def _speaks_http2(conn: socket.socket) -> bool:
    """Whether the peer answers the HTTP/2 preface with a SETTINGS frame, as a gRPC server (Ray's
    GCS, or its client server for ``ray://``) does first (RFC 9113 §3.4: frame type 4)."""
    try:
        conn.sendall(HTTP2_PREFACE)
        head = b""
        while len(head) < 9:
            got = conn.recv(9 - len(head))
            if not got:
                break
            head += got
    except OSError:
        return False
    return len(head) == 9 and head[3] == 4


_STARTED: list[float] = []
"""When the first embedded cluster this process still runs was started (epoch seconds)."""

_SESSION_DIRS: list[str] = []
"""The temporary folders of the embedded clusters this process started (:func:`start_ray`)."""


def _session_root() -> str | None:
    """Where an embedded cluster's session folder goes, in Ray's own order of choice:
    ``$RAY_TMPDIR``, else ``/tmp`` on macOS (its per-user ``$TMPDIR`` alone takes about 50 of
    the 104 bytes a socket's path may have, and the sockets live under this folder), else the
    system's temporary folder (``$TMPDIR`` on Linux: where objects spill, so a small ``/tmp``
    is not filled)."""
    if os.environ.get("RAY_TMPDIR"):
        return os.environ["RAY_TMPDIR"]
    if sys.platform == "darwin":
        return "/tmp"
    return tempfile.gettempdir()


def _remove_session_dirs(folders: list[str] | None = None, patience_s: float = 3.0) -> None:
    """Remove ``folders`` (default: every session folder of the clusters this process started,
    which are stopped); Ray's processes that are still ending can write a log file into one as
    they go, so each is tried again for up to ``patience_s``."""
    folders = _SESSION_DIRS if folders is None else folders
    end = time.monotonic() + patience_s
    while folders:
        folder = folders[-1]
        shutil.rmtree(folder, ignore_errors=True)
        if os.path.exists(folder) and time.monotonic() < end:
            time.sleep(0.1)
            continue
        folders.pop()


def stop_ray() -> None:
    """Stop this process's Ray connection (and, for an embedded cluster, its processes and its
    session folder)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    if _SESSION_DIRS:
        # an agent still ending made its session folder again after it was removed (an empty
        # one was left after a test file's cluster): the folder goes once they are gone
        _kill_and_wait(_ray_processes_since(_STARTED[0]), 5.0, grace=3.0)
    _remove_session_dirs()
    _STARTED.clear()


def _ray_processes_since(t0: float) -> list[int]:
    """Ray's processes started at or after ``t0`` (epoch seconds) by this process: its
    descendants, and those in its process group (an agent whose raylet has died is no longer a
    descendant)."""
    try:
        import psutil
    except ImportError:
        return []
    me = psutil.Process()
    mine = {p.pid for p in me.children(recursive=True)}
    group = os.getpgid(0)
    found = []
    for p in psutil.process_iter(["pid", "create_time"]):
        with contextlib.suppress(psutil.Error, OSError):
            if p.info["create_time"] < t0 - 1.0 or p.pid == me.pid:
                continue
            if (p.pid in mine or os.getpgid(p.pid) == group) and _is_ray(p):
                found.append(p.pid)
    return found


def _any_ended(pids: Sequence[int]) -> bool:
    """Whether any of these processes has ended (gone, or a zombie not yet reaped)."""
    try:
        import psutil
    except ImportError:
        return False
    for pid in pids:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:
            continue
    return False


def _cluster_processes(started: float) -> list[int]:
    """The GCS and raylet of the embedded cluster started at ``started`` (epoch seconds)."""
    return _cluster_core(_ray_processes_since(started))


def _cluster_core(pids: Sequence[int]) -> list[int]:
    """Those of ``pids`` that are the cluster's GCS or raylet. Not its workers: the actors'
    processes end when :meth:`RayPool.close` kills them, which made every batch look cut down
    by a signal (its processes killed, its session folder left, and the interpreter's exit
    waiting 5 s on the dead GCS: 15.7 s for a batch whose summary said 7.2)."""
    try:
        import psutil
    except ImportError:
        return []
    core = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).name() in ("gcs_server", "raylet"):
                core.append(pid)
    return core


def _is_ray(p: Any) -> bool:
    """Whether ``p`` (a ``psutil.Process``) is one of Ray's: a binary or script of its package,
    or a process titled ``ray::`` (a worker, an agent)."""
    import ray

    package = os.path.dirname(ray.__file__)
    return any(part.startswith("ray::") or part.startswith(package) for part in p.cmdline())


def _kill_and_wait(pids: Sequence[int], timeout: float, grace: float = 0.0) -> bool:
    """SIGKILL those of these processes that are still Ray's (a pid can be reused) and wait
    until each has ended; with ``grace`` (s), those that end by themselves within it are left
    to do so.

    Returns:
        ``False`` without psutil (the batch extra brings it; Ray alone does not).
    """
    try:
        import psutil
    except ImportError:
        return False
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            if _is_ray(p):
                procs.append(p)
    _, alive = psutil.wait_procs(procs, timeout=grace) if grace > 0 else ([], procs)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=timeout)
    return True


def even_share(cpus: float, node_cpus: float, workers: int) -> float:
    """Each of ``workers`` actors' CPU share of a cluster with ``cpus`` CPUs, the largest node
    having ``node_cpus``: whole CPUs where there are enough (x264 and the decoder take whole
    threads), never more than one node holds, at least a fraction so that every actor fits."""
    share = cpus / max(1, workers)
    return float(min(int(share), int(node_cpus))) if share >= 1 else share


def _cause(exc: Any) -> BaseException:
    """The worker's own exception inside a ``RayTaskError``: the error itself, whose message is
    the user's one line (``as_instanceof_cause`` keeps Ray's remote traceback as its text)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc.as_instanceof_cause()


def _node_cpus(ray: Any) -> float:
    return max((float(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes()
                if n.get("Alive")), default=1.0)


class RayPool:
    """Ray actors as batch workers.

    Args:
        factory: picklable; builds one engine inside each actor.
        video: video options.
        workers: actors; ``None``: as many as the cluster's GPUs (or CPUs, for CPU workers)
            allow at the given share.
        gpus_per_worker: GPU share per actor (fractional allowed); 0 for CPU workers; ``None``:
            1 for the ``neural`` engine when the cluster has a GPU, else 0.
        cpus_per_worker: CPU share per actor, also its OpenCV thread count (rounded) and
            its codec threads (:func:`~livefuse.batch.worker.codec_threads`); ``None``: the
            cluster's CPUs shared evenly among the actors (whole CPUs where there are enough):
            four actors each with FFmpeg's own choice ran 160 codec threads on 16 cores.
        address: ``None`` embedded, else ``auto`` or ``HOST:PORT``.
        neural: the engine is the neural one.
        most: no more actors than this (the batch's units: more would idle).

    Raises:
        LivefuseError: Ray missing, the cluster unreachable, too few GPUs for one worker,
            more CPUs per worker than any machine of the cluster has, or more workers than the
            cluster's CPUs or GPUs hold at their shares (Ray would wait for them for ever).
    """

    def __init__(self, factory: Callable[[], Any], video: VideoOptions | None = None,
                 workers: int | None = None, gpus_per_worker: float | None = 0.0,
                 cpus_per_worker: float | None = None, address: str | None = None,
                 neural: bool = False, most: int | None = None) -> None:
        started = time.time()
        self.owned = start_ray(address)
        self._started = started
        # the embedded cluster's GCS and raylet, to see at the end whether a signal to the
        # whole process group has already ended them
        self._cluster = _cluster_processes(started) if self.owned else []
        import ray

        try:
            res = ray.cluster_resources()
            if gpus_per_worker is None:  # the neural engine takes a whole GPU where there is one
                gpus_per_worker = 1.0 if neural and res.get("GPU", 0) > 0 else 0.0
            if gpus_per_worker > 0 and res.get("GPU", 0) < gpus_per_worker:
                raise LivefuseError(f"--gpus-per-worker {gpus_per_worker:g}: the cluster has "
                                    f"{res.get('GPU', 0):g} GPU(s)")
            if workers is None:
                share = res.get("GPU", 0) / gpus_per_worker if gpus_per_worker > 0 else \
                    res.get("CPU", 1) / max(cpus_per_worker or 1.0, 1e-6)
                workers = max(1, int(share + 1e-9))
            if most is not None:
                workers = min(workers, max(1, most))
            node_cpus = _node_cpus(ray)
            if cpus_per_worker is None:
                cpus_per_worker = even_share(res.get("CPU", 1.0), node_cpus, workers)
            elif cpus_per_worker > node_cpus:  # Ray would wait for such a machine for ever
                raise LivefuseError(f"--cpus-per-worker {cpus_per_worker:g}: no machine of the "
                                    f"cluster has more than {node_cpus:g} CPUs")
            # and for actors that the whole cluster cannot hold at once
            for flag, share, kind in (("--cpus-per-worker", cpus_per_worker, "CPU"),
                                      ("--gpus-per-worker", gpus_per_worker, "GPU")):
                if share > 0 and workers * share > res.get(kind, 0) + 1e-9:
                    raise LivefuseError(
                        f"--workers {workers} x {flag} {share:g} needs {workers * share:g} "
                        f"{kind}s; the cluster has {res.get(kind, 0):g}")
            actor = ray.remote(_RayWorker).options(
                num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, max_concurrency=2)
            # the share itself: 2.5 CPUs are 4 codec threads (an option trial: rounded first to
            # a whole CPU, they were 3, and 0.5 CPU gave 2 instead of 1)
            self.actors: dict[str, Any] = {n: actor.remote(factory, video, n, cpus_per_worker)
                                           for n in worker_names(workers)}
            self.info: dict[str, WorkerInfo] = dict(zip(
                self.actors, ray.get([a.where.remote() for a in self.actors.values()]),
                strict=True))
        except BaseException:
            if self.owned:
                stop_ray()
            raise
        self._units: dict[Hashable, tuple[str, Unit]] = {}
        where = "embedded local cluster" if self.owned else \
            f"cluster at {address}" if address else "the cluster this process had joined"
        gpu = f", {gpus_per_worker:.3g} GPU each" if gpus_per_worker else ""
        self.description = (f"Ray ({where}): {len(self.actors)} worker"
                            f"{'s' if len(self.actors) > 1 else ''}, {cpus_per_worker:.3g} CPU"
                            f"{' each' if not gpu else ''}{gpu}")

    def names(self) -> list[str]:
        return list(self.actors)

    def prepare(self) -> None:
        """Build every actor's engine now (in parallel).

        Raises:
            LivefuseError: the engine cannot be built (the first actor's error).
        """
        import ray

        refs = [a.prepare.remote() for a in self.actors.values()]
        try:
            ray.get(refs)
        except ray.exceptions.RayTaskError as exc:
            cause = _cause(exc)
            if isinstance(cause, LivefuseError):
                raise cause from None
            raise

    def submit(self, worker: str, unit: Unit) -> Hashable:
        ref = self.actors[worker].run.remote(unit)
        self._units[ref] = (worker, unit)
        return ref

    def wait(self, handles: Sequence[Hashable], timeout: float) -> list[Hashable]:
        import ray

        ready, rest = ray.wait(list(handles), num_returns=1, timeout=timeout)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        return list(ready)

    def result(self, handle: Hashable) -> UnitResult:
        import ray

        worker, unit = self._units.pop(handle)
        try:
            res: UnitResult = ray.get(handle)  # type: ignore[call-overload]
        except ray.exceptions.RayActorError as exc:
            raise WorkerLost(str(exc).splitlines()[0]) from exc
        except ray.exceptions.RayTaskError as exc:  # run() let something through
            cause = _cause(exc)
            return UnitResult(unit, ok=False, worker=worker,
                              message=f"'{unit.item.input}': {type(cause).__name__}: {cause}")
        return res

    def gpu(self, worker: str) -> GpuKey | None:
        info = self.info[worker]
        return (info.node, info.gpu_ids[0]) if info.gpu_ids else None

    def mem_info(self, worker: str) -> tuple[int, int] | None:
        import ray

        info: tuple[int, int] | None = ray.get(self.actors[worker].mem_info.remote(),
                                               timeout=STOP_TIMEOUT_S)
        return info

    def frames_done(self) -> int:
        import ray

        try:
            return sum(ray.get([a.frames_done.remote() for a in self.actors.values()],
                               timeout=5.0))
        except ray.exceptions.RayError:
            return 0

    def stats(self) -> list[WorkerStats]:
        import ray

        out = []
        for name, a in self.actors.items():
            try:
                out.append(ray.get(a.stats.remote(), timeout=STOP_TIMEOUT_S))
            except ray.exceptions.RayError:
                out.append(WorkerStats(self.info[name], errors=["worker lost"]))
        return out

    def cancel(self) -> None:
        """Kill every actor now and make sure each is gone (a worker on this machine: by its
        pid; elsewhere: until Ray reports it dead, up to :data:`STOP_TIMEOUT_S`), so none writes
        after the caller removes the partial outputs."""
        import ray

        for a in self.actors.values():
            ray.kill(a, no_restart=True)
        # a SIGTERM to the whole process group (a service manager, `timeout`) reaches Ray's
        # own processes too: they stop answering while the workers, in process groups of
        # their own, live on; waiting for Ray to report them dead took the whole
        # STOP_TIMEOUT_S (a new user's trial: 37 s to exit)
        # (after a moment: an actor that Ray ends is reported as stopped; one killed by its
        # pid, as a worker that "died by an unexpected system error... the OOM killer?")
        here = {n for n in self.actors if self.info[n].host == socket.gethostname()}
        if not _kill_and_wait([self.info[n].pid for n in here], STOP_TIMEOUT_S,
                              grace=KILL_GRACE_S):
            here = set()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for name, a in self.actors.items():
            while name not in here and time.monotonic() < deadline:
                try:
                    ray.get(a.where.remote(), timeout=1.0)
                except ray.exceptions.RayActorError:
                    break
                except ray.exceptions.GetTimeoutError:
                    continue
                time.sleep(0.05)  # pragma: no cover  (answered: not dead yet)

    def close(self) -> None:
        import ray

        try:
            for a in self.actors.values():
                ray.kill(a, no_restart=True)
        finally:
            if self.owned:
                if _any_ended(self._cluster):
                    # a SIGTERM to the whole process group (a service manager, `timeout`, a
                    # container's stop) ended Ray's GCS or raylet too: ray.shutdown then waited
                    # 5-8 s on the dead GCS before returning. What is left is killed instead;
                    # the process is on its way out (the CLI exits at once after this).
                    _kill_and_wait(_ray_processes_since(self._started), 5.0)
                    _remove_session_dirs()
                else:
                    stop_ray()
            del ray


__all__ = ["OBJECT_STORE_BYTES", "LocalPool", "RayPool", "ray_available", "start_ray",
           "stop_ray"]
