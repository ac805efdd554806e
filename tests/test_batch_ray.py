"""``livefuse batch`` on Ray (issues 16, 20): one embedded Ray instance shared by these tests
(num_cpus=2, a fake node with two GPUs, a small object store), stopped at the end with none of its
processes left. Skipped when Ray is not installed (``pip install ".[batch]"``; the test extra
has it)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from clips import audio_packets, face_clip, frame_times

from livefuse.batch.dispatch import Dispatcher, GpuKey
from livefuse.batch.plan import CHUNK_DIR, Item, Unit
from livefuse.batch.resume import MANIFEST
from livefuse.batch.worker import EngineSpec, UnitResult
from livefuse.config import EngineConfig

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="Ray is not installed")

GiB = 2**30
STOP_S = 30.0


def _session_processes(session: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(session in part for part in (p.info["cmdline"] or [])):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _wait_gone(session: str, timeout: float = 20.0) -> list[psutil.Process]:
    end = time.monotonic() + timeout
    left = _session_processes(session)
    while left and time.monotonic() < end:
        time.sleep(0.2)
        left = _session_processes(session)
    return left


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """The shared embedded cluster: 2 CPUs, 2 fake GPUs, an 80 MiB object store."""
    from livefuse.batch.executor import start_ray, stop_ray

    assert start_ray(None, num_cpus=2, num_gpus=2, object_store_bytes=80 * 2**20)
    import ray

    folder = Path(ray._private.worker._global_node.get_session_dir_path())
    session = folder.name
    # a temporary folder of its own, not /tmp/ray, where every session's stays
    assert folder.parent.name.startswith("livefuse-ray-")
    try:
        yield session
    finally:
        stop_ray()
        assert _wait_gone(session) == [], "Ray processes left after the tests"
        assert not folder.parent.exists(), "the session folder was left"


@pytest.fixture(scope="module")
def face_video(tmp_path_factory: pytest.TempPathFactory, t1_path: Path, analyser) -> Path:  # type: ignore[no-untyped-def]
    from livefuse.imaging import load_image

    photo = load_image(t1_path).bgr
    face = max(analyser.detect(photo), key=lambda f: f.area)
    return face_clip(tmp_path_factory.mktemp("v") / "talk.mp4", photo, face.bbox, 96, gop=15,
                     audio_tracks=1)


def test_classic_workers_on_ray_cut_join_fail_alone_and_resume(
        ray_cluster: str, tmp_path: Path, face_video: Path, t1_path: Path,
        astronaut_path: Path) -> None:
    from livefuse.batch.runner import BatchOptions, run_batch

    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(face_video, folder / "talk.mp4")
    shutil.copy(t1_path, folder / "group.jpg")
    (folder / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 50)
    out = tmp_path / "out"
    spec = EngineSpec(EngineConfig(engine="classic", detect_every=3), astronaut_path)
    opts = BatchOptions((str(folder),), out, workers=2, chunk_seconds=1.0, executor="ray")
    summary = run_batch(opts, spec, quiet=True, detect_every=3)
    status = {r.item.input.name: r.status for r in summary.results}
    assert status == {"broken.mp4": "failed", "group.jpg": "done", "talk.mp4": "done"}
    assert summary.executor.startswith("Ray (the cluster this process had joined): 2 workers")
    # the video was cut into chunks, spread over both actors, and joined exactly
    assert all(w.units >= 1 for w in summary.workers) and len(summary.workers) == 2
    assert len({w.info.pid for w in summary.workers}) == 2
    assert frame_times(out / "talk.mp4") == frame_times(face_video)
    assert audio_packets(out / "talk.mp4") == audio_packets(face_video)
    assert not (out / CHUNK_DIR).exists()
    # resume: what is done is skipped, the broken file fails again, alone
    again = run_batch(opts, spec, quiet=True, detect_every=3)
    assert {r.item.input.name: r.status for r in again.results} == {
        "broken.mp4": "failed", "group.jpg": "skipped", "talk.mp4": "skipped"}


def test_fractional_gpus_place_two_workers_per_gpu_and_admission_holds_back_a_full_one(
        ray_cluster: str, tmp_path: Path, t1_path: Path) -> None:
    from livefuse.batch.executor import RayPool
    from livefuse.testing.stub_engine import marking_engine

    pool = RayPool(marking_engine, workers=4, gpus_per_worker=0.5, cpus_per_worker=0.25)
    try:
        placement = {n: pool.info[n].cuda_visible_devices for n in pool.names()}
        assert sorted(placement.values()) == ["0", "0", "1", "1"]  # Ray's own assignment
        assert {n: pool.gpu(n)[1] for n in pool.names()} == placement  # type: ignore[index]
        full = next(iter(pool.info.values())).node, "1"

        def vram(gpu: GpuKey, worker: str) -> tuple[int, int]:
            used = 0.9 if gpu == full else 0.3  # another program holds GPU 1
            return int((1 - used) * 16 * GiB), 16 * GiB

        units = [Unit(Item(t1_path, tmp_path / f"{k}.jpg", "image"), tmp_path / f"{k}.jpg")
                 for k in range(8)]
        lines: list[str] = []
        results: list[UnitResult] = []
        Dispatcher(pool, vram=vram, on_status=lines.append).run(units, results.append)
        assert all(r.ok for r in results) and len(results) == 8
        on_gpu0 = {n for n, dev in placement.items() if dev == "0"}
        assert {r.worker for r in results} <= on_gpu0
        assert any("GPU 1" in ln and "above the 85% limit" in ln for ln in lines)
    finally:
        pool.close()


def test_address_joins_a_running_cluster_and_leaves_it_running(
        ray_cluster: str, tmp_path: Path, t1_path: Path, astronaut_path: Path) -> None:
    import ray

    address = ray.get_runtime_context().gcs_address
    proc = subprocess.run(
        [sys.executable, "-m", "livefuse", "batch", str(t1_path), "-o", str(tmp_path / "out"),
         "-s", str(astronaut_path), "-q", "--address", address, "--workers", "1",
         "--engine", "classic"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"Ray (cluster at {address}): 1 worker" in proc.stdout
    assert (tmp_path / "out" / "t1.jpg").exists()
    assert ray.cluster_resources().get("CPU") == 2  # the shared cluster is still up
    assert _session_processes(ray_cluster)


def _ray_sessions() -> set[str]:
    """The embedded clusters' session folders (livefuse's own, removed when it stops) and
    Ray's default ones (kept)."""
    import tempfile

    mine, ray = Path(tempfile.gettempdir()), Path("/tmp")
    return {str(p) for p in [*mine.glob("livefuse-ray-*"), *ray.glob("ray/session_2*")]}


@pytest.mark.parametrize("sig, code, chunks", [(signal.SIGINT, 130, "0"),
                                               (signal.SIGTERM, 143, "1")])
def test_ctrl_c_cancels_every_task_cleans_up_and_leaves_no_ray_process(
        ray_cluster: str, tmp_path: Path, face_video: Path, astronaut_path: Path,
        sig: signal.Signals, code: int, chunks: str) -> None:
    """Ctrl-C (SIGINT) with whole videos, whose part files sit beside their outputs, and SIGTERM
    with chunked ones, whose parts sit in the chunk folder. Each goes to the whole process
    group, as a terminal's Ctrl-C and a service manager's stop do: Ray's own processes get it
    too, and the clean-up waited out STOP_TIMEOUT_S (30 s) for workers Ray no longer
    answered for."""
    from livefuse.batch.executor import STOP_TIMEOUT_S

    folder = tmp_path / "in"
    folder.mkdir()
    for k in range(3):
        shutil.copy(face_video, folder / f"v{k}.mp4")
    out = tmp_path / "out"
    before = _ray_sessions()
    proc = subprocess.Popen(
        [sys.executable, "-m", "livefuse", "batch", str(folder), "-o", str(out), "-s",
         str(astronaut_path), "--executor", "ray", "--workers", "2", "--chunk-seconds", chunks,
         "--engine", "classic"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None and \
            not list(out.rglob("*livefuse-part*")):
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    assert list(out.rglob("*livefuse-part*")), "the batch never started writing"
    # the command's own embedded cluster (another Ray user on the machine may start sessions
    # meanwhile: only one of livefuse's, holding a session named after the process, is it)
    new = {name for name in _ray_sessions() - before if "/livefuse-ray-" in name and
           any(s.name.endswith(f"_{proc.pid}") for s in Path(name).glob("session_2*"))}
    assert len(new) == 1, (new, _ray_sessions() - before, proc.pid)
    os.killpg(proc.pid, sig)
    try:
        _, err = proc.communicate(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert proc.returncode == code, err
    assert "Traceback" not in err
    # no part file and no output; only chunks finished before the signal stay, each listed in
    # its video's manifest, for the rerun (livefuse.batch.resume)
    left = sorted(p for p in out.rglob("*") if p.is_file()) if out.exists() else []
    for p in left:
        assert p.parent.parent == out / CHUNK_DIR, left
        listed = json.loads((p.parent / MANIFEST).read_text())["done"]
        assert p.name == MANIFEST or p.name in {f"chunk-{int(k):04d}.mp4" for k in listed}, left
    session = new.pop()
    assert _wait_gone(session) == []
    assert not Path(session).exists(), "its session folder was left"


def test_a_cpu_share_no_machine_has_is_refused_not_waited_for(ray_cluster: str) -> None:
    """Ray keeps an actor that fits no node pending for ever: ``batch --cpus-per-worker 100``
    hung a new user's 2-core machine until it was killed."""
    from livefuse.batch.executor import RayPool
    from livefuse.errors import LivefuseError
    from livefuse.testing.stub_engine import marking_engine

    with pytest.raises(LivefuseError, match=r"--cpus-per-worker 3: no machine of the cluster "
                                            r"has more than 2 CPUs"):
        RayPool(marking_engine, workers=1, cpus_per_worker=3)


def test_more_workers_than_the_cluster_holds_are_refused_not_waited_for(
        ray_cluster: str) -> None:
    """A new user's trial: ``--workers 2 --cpus-per-worker 2`` on 2 CPUs waited for ever."""
    from livefuse.batch.executor import RayPool
    from livefuse.errors import LivefuseError
    from livefuse.testing.stub_engine import marking_engine

    with pytest.raises(LivefuseError, match=r"--workers 3 x --cpus-per-worker 1 needs 3 CPUs; "
                                            r"the cluster has 2"):
        RayPool(marking_engine, workers=3, cpus_per_worker=1)
    with pytest.raises(LivefuseError, match=r"--workers 5 x --gpus-per-worker 0.5 needs 2.5 "
                                            r"GPUs; the cluster has 2"):
        RayPool(marking_engine, workers=5, gpus_per_worker=0.5, cpus_per_worker=0.25)


def test_a_source_without_a_face_is_one_line_from_a_ray_worker(
        ray_cluster: str, tmp_path: Path) -> None:
    """A new user's trial: the worker's NoFaceError came back as Ray's remote traceback."""
    import cv2
    import numpy as np

    from livefuse.batch.executor import RayPool
    from livefuse.errors import LivefuseError

    plain = tmp_path / "plain.png"
    cv2.imwrite(str(plain), np.full((200, 200, 3), 128, np.uint8))
    pool = RayPool(EngineSpec(EngineConfig(engine="classic"), plain), workers=1)
    try:
        with pytest.raises(LivefuseError) as err:
            pool.prepare()
    finally:
        pool.close()
    text = str(err.value)
    assert "plain.png" in text and "ray::" not in text and "\n" not in text.strip()



def test_an_address_where_nothing_listens_is_refused_at_once() -> None:
    """A new user's ``--address 127.0.0.1:1`` ran for minutes, printing Ray's C++ warnings."""
    from livefuse.batch.executor import start_ray
    from livefuse.errors import LivefuseError

    t0 = time.monotonic()
    with pytest.raises(LivefuseError, match=r"127\.0\.0\.1:1: nothing answers there"):
        start_ray("127.0.0.1:1")
    assert time.monotonic() - t0 < 10
    with pytest.raises(LivefuseError, match="give auto or HOST:PORT"):
        start_ray("nonsense")


@pytest.mark.parametrize("peer", ["web server", "silent"])
def test_an_address_where_something_else_listens_is_refused_at_once(peer: str) -> None:
    """A new user's ``--address`` at a web server's port hung for minutes in ``ray.init``,
    printing Ray's C++ warnings; a listener that never answers likewise."""
    import http.server
    import threading

    from livefuse.batch.executor import start_ray
    from livefuse.errors import LivefuseError

    if peer == "web server":
        server: Any = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]
    else:
        server = socket.create_server(("127.0.0.1", 0))
        port = server.getsockname()[1]
    try:
        t0 = time.monotonic()
        with pytest.raises(LivefuseError, match=rf"127\.0\.0\.1:{port}: something answers "
                                                r"there, but not Ray"):
            start_ray(f"127.0.0.1:{port}")
        assert time.monotonic() - t0 < 10
    finally:
        if peer == "web server":
            server.shutdown()
            server.server_close()
        else:
            server.close()


class _Stop(Exception):
    pass


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), SystemExit(signal.SIGTERM)])
def test_an_interrupt_while_ray_starts_stops_what_started(
        monkeypatch: pytest.MonkeyPatch, interrupt: BaseException) -> None:
    """Ctrl-C 2-3 s into a new user's batch left Ray's agents running for a minute (Ray's
    shutdown does not know a node whose start it did not finish); SIGTERM then ended it with
    Ray's bare exit 15 instead of the CLI's clean-up and 143. The interrupted start ends the Ray
    processes it started, and only those."""
    import ray

    from livefuse.batch.executor import start_ray

    package = str(Path(ray.__file__).parent)

    def sleeper(*tag: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *tag])

    earlier = sleeper(package)  # another cluster's, started before this one
    time.sleep(1.1)  # process start times have a resolution of 10 ms, and a 1 s margin
    spawned: list[subprocess.Popen[bytes]] = []

    def init(*args: object, **kw: object) -> None:
        spawned.append(sleeper(package))  # as one of Ray's binaries, or an agent
        spawned.append(sleeper())  # something else of this process's
        raise interrupt

    shutdowns: list[bool] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: shutdowns.append(True))

    def ours(signum: int, frame: object) -> None:  # the CLI's SIGTERM handler raises
        raise _Stop

    old = signal.signal(signal.SIGTERM, ours)
    try:
        with pytest.raises(_Stop if isinstance(interrupt, SystemExit) else KeyboardInterrupt):
            start_ray(None)
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, old)
        alive = [p.poll() is None for p in (earlier, *spawned)]
        for p in (earlier, *spawned):
            p.kill()
            p.wait()
    assert shutdowns == [True]
    assert alive == [True, False, True]


def test_a_ctrl_c_lost_while_ray_starts_still_stops_the_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's Ctrl-C landed in logging's after-fork hook while Ray started its
    processes; Python printed "Exception ignored" and dropped it, and the batch ran to the end
    with exit 0. A Ctrl-C during the start is noted, and raised once ``ray.init`` returns."""
    import ray

    from livefuse.batch.executor import start_ray

    package = str(Path(ray.__file__).parent)
    spawned: list[subprocess.Popen[bytes]] = []

    def init(*args: object, **kw: object) -> None:
        spawned.append(subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)", package]))
        try:
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.05)  # the handler runs here, in the main thread
        except KeyboardInterrupt:
            pass  # as Python does with an exception raised in an at-fork hook

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    try:
        with pytest.raises(KeyboardInterrupt):
            start_ray(None)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert [p.poll() is None for p in spawned] == [False]  # what it started, ended
    finally:
        for p in spawned:
            p.kill()
            p.wait()


@pytest.mark.parametrize("ended", [True, False])
def test_an_embedded_cluster_a_signal_has_hit_is_killed_not_shut_down(
        monkeypatch: pytest.MonkeyPatch, ended: bool) -> None:
    """After a SIGTERM to the whole process group Ray's GCS is gone, and ray.shutdown waited
    5-8 s on it before the command could exit; a cluster still whole is shut down as Ray
    means it to be."""
    from livefuse.batch import executor

    calls: list[str] = []
    monkeypatch.setattr(executor, "stop_ray", lambda: calls.append("shutdown"))
    monkeypatch.setattr(executor, "_kill_and_wait",
                        lambda pids, timeout, grace=0.0: calls.append("kill") or True)
    monkeypatch.setattr(executor, "_ray_processes_since", lambda t0: [])
    # not the shared cluster's folder, which this pretend pool would take for its own
    monkeypatch.setattr(executor, "_remove_session_dirs", lambda: None)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    pool = object.__new__(executor.RayPool)
    pool.actors, pool.owned, pool._started = {}, True, time.time()
    pool._cluster = [os.getpid(), gone.pid] if ended else [os.getpid()]
    pool.close()
    assert calls == (["kill"] if ended else ["shutdown"])


def test_a_batch_that_ends_as_it_should_shuts_its_cluster_down(
        ray_cluster: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cluster's processes noted at the start included Ray's idle worker that became the
    actor, whose process ends when the pool kills its actors: every finished batch was taken
    for one a signal had hit, its processes killed instead of shut down, its session folder
    left, and the command's exit waited 5 s on the dead GCS. Only the GCS and raylet count."""
    import psutil

    from livefuse.batch import executor

    everything = executor._ray_processes_since(0.0)  # the shared cluster's, and its workers'
    core = executor._cluster_core(everything)
    assert sorted(psutil.Process(p).name() for p in core) == ["gcs_server", "raylet"]
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    monkeypatch.setattr(executor, "_ray_processes_since", lambda t0: [*core, worker.pid])
    noted = executor._cluster_processes(time.time())  # what a pool notes when it starts
    assert sorted(noted) == sorted(core)
    calls: list[str] = []
    monkeypatch.setattr(executor, "stop_ray", lambda: calls.append("shutdown"))
    monkeypatch.setattr(executor, "_kill_and_wait",
                        lambda pids, timeout, grace=0.0: calls.append("kill") or True)
    monkeypatch.setattr(executor, "_remove_session_dirs", lambda: calls.append("removed"))
    pool = object.__new__(executor.RayPool)
    pool.actors, pool.owned, pool._started, pool._cluster = {}, True, time.time(), noted
    worker.kill()  # as the actor's process ends when the pool kills it
    worker.wait()
    pool.close()
    assert calls == ["shutdown"]
