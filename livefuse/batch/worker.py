"""A batch worker: one unit in, one output file out, with the code ``livefuse run`` uses.

A worker builds its engine once (models loaded, source face prepared) on its first unit and
keeps it for every unit after: a Ray actor or a worker thread of the in-process pool. Input
problems (a corrupt file, a target with no face) are results, not exceptions, so one bad item
never stops the batch. Everything here is picklable (Ray sends units, results and the engine
spec between processes) and nothing imports Ray.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from livefuse.batch.plan import Unit
from livefuse.config import CacheConfig, EngineConfig
from livefuse.errors import ImageLoadError, LivefuseError, NothingSwappedError, VideoError
from livefuse.io.pipeline import Cancelled
from livefuse.io.video import VideoOptions

if TYPE_CHECKING:  # the engine loads when a worker builds it, not when this module imports
    from livefuse.engine import Engine


@dataclass(frozen=True)
class EngineSpec:
    """What a worker needs to build its engine: the settings and the photos, never the models
    themselves (each worker loads its own). Calling it builds the engine.

    Attributes:
        config: the engine settings (validated; ``engine`` already resolved from ``auto``).
        source: the source face photo; source_face_index: which of its faces.
        reference: the reference photo for ``face_selector='reference'``.
        cache: pose-similarity cache settings (off by default, as ``run``).
    """

    config: EngineConfig
    source: Path
    source_face_index: int | None = None
    reference: Path | None = None
    cache: CacheConfig | None = None

    def __call__(self) -> Engine:
        from livefuse.engine import Engine
        from livefuse.imaging import load_image

        engine = Engine(self.config, cache=self.cache)
        engine.set_source(load_image(self.source), face_index=self.source_face_index)
        if self.reference is not None:
            engine.set_reference(load_image(self.reference))
        return engine


JOB_PARTS = {"version": "the livefuse version", "settings": "the engine settings",
             "still": "the engine settings", "engine": "the engine settings",
             "photos": "the face photo",
             "encoding": "the video options", "video": "the video options",
             "chunks": "--chunk-seconds"}
"""The parts of a :func:`job_key`, and how a sentence names each."""

SUPERSEDED = {"engine": "settings", "video": "encoding"}
"""Parts as records written before their successor existed hashed them (``engine``: the
settings' repr, the device and the models folder as spelt; ``video``: the encoder as named,
``auto`` too): :func:`job_changes` compares one only with a key that lacks its successor, so a
season recorded then is never kept under other settings (though, as then, another spelling of
the device, the models folder or the encoder still remakes it)."""

VIDEO_PARTS = ("encoding", "video")
"""The parts that decide a video's pixels and not a photo's."""


def job_key(spec: EngineSpec, video: VideoOptions, chunk_seconds: float | None = None, *,
            workers_here: bool = True, cpu_workers: bool = False) -> str:
    """What decides a long video's chunks and their pixels: livefuse's version, the engine
    settings, the source and reference photos (their contents), the encoder and
    quality, and ``--chunk-seconds`` (``None``: chosen from the workers). An interrupted
    batch's finished chunks are reused only under the same key (:mod:`livefuse.batch.resume`),
    so a rerun with another face or setting starts over.

    For the neural engine this imports torch (to resolve ``auto`` device and precision).
    ``workers_here``: the workers run on this machine (not a joined cluster, whose GPUs and
    encoders this machine cannot see): only then are ``auto`` device, precision and encoder
    resolved; otherwise they are keyed as given. ``cpu_workers``: the workers have no GPU
    (``--gpus-per-worker 0``), whatever this machine has.

    Returns:
        ``part=hex;...`` for each of :data:`JOB_PARTS` (8 hex digits of SHA-256 each), so a
        rerun can say which part changed.
    """
    import hashlib
    import json

    from livefuse import __version__

    def stamp(p: Path | None) -> str | None:
        # its bytes, not its path and time: the same photo copied, moved or touched is the
        # same face (a review: a touched face.jpg made a whole season again)
        return None if p is None else hashlib.sha256(p.read_bytes()).hexdigest()

    parts: dict[str, object] = {
        "version": __version__,
        "settings": [_pixel_settings(spec.config, workers_here, cpu_workers), repr(spec.cache),
                     spec.source_face_index],
        # as they decide a photo's pixels: without those that act across frames
        "still": [_pixel_settings(replace(spec.config, detect_every=1, smooth=True),
                                  workers_here, cpu_workers), spec.source_face_index],
        "engine": [repr(spec.config), repr(spec.cache), spec.source_face_index],
        "photos": [stamp(spec.source), stamp(spec.reference)],
        "encoding": [_encoder_named(video.encoder, video.crf) if workers_here
                     else video.encoder, video.crf],
        "video": [video.encoder, video.crf],
        "chunks": chunk_seconds,
    }
    return ";".join(f"{name}={hashlib.sha256(json.dumps(value).encode()).hexdigest()[:8]}"
                    for name, value in parts.items())


def _pixel_settings(config: EngineConfig, here: bool = True, cpu: bool = False) -> str:
    """The engine settings as they decide the pixels. The device as the kind it resolves to
    (``cpu`` or ``cuda``) and the precision as resolved on it: ``auto`` against ``cuda``, or
    ``cuda:1``, is the same job (a review found that either remade a season of outputs), while
    a CPU, or a GPU that runs another precision, is not. An explicit models folder as the
    absolute folder it names (a relative ``--models-dir`` and its absolute path are one); the
    default one as ``None``, whatever user's home it is in. The classic engine reads neither.
    Workers elsewhere (not ``here``) have the device and precision keyed as given; CPU workers
    (``cpu``) run on the CPU whatever was asked."""
    from livefuse.precision import DeviceInfo, probe_device, resolve_precision
    from livefuse.swap.neural_engine import resolve_device

    if config.engine == "classic":
        return repr(replace(config, device="", models_dir=None))
    if not here and not cpu:  # this machine cannot see the workers' GPUs nor folders
        return repr(replace(config, device=config.device.split(":")[0]))
    device = "cpu" if cpu else resolve_device(config.device)
    try:
        info = probe_device(device)
    except Exception:  # a GPU index this machine lacks: the engine's build will say so
        info = DeviceInfo(kind=device.split(":")[0])
    precision, _ = resolve_precision(config.precision, info)
    folder = None if config.models_dir is None else \
        str(Path(config.models_dir).expanduser().resolve())
    return repr(replace(config, device=info.kind, precision=precision,  # type: ignore[arg-type]
                        models_dir=folder))


def _encoder_named(name: str, crf: int) -> str:
    """The encoder ``--video-encoder name`` opens here: ``auto`` and the encoder it picks are
    the same job (a new user's trial: ``--video-encoder libx264`` after ``auto`` remade six
    byte-identical outputs)."""
    from livefuse.errors import LivefuseError
    from livefuse.io.codecs import choose_encoder

    try:
        return choose_encoder(name, crf).name
    except LivefuseError:  # refused where the batch starts, with its own message
        return name


def _parts(key: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in key.split(";") if "=" in p)


def job_changes(before: str, now: str, only: Collection[str] | None = None) -> list[str]:
    """What differs between two :func:`job_key` values, in words (empty when a key is not of
    that form: all that is known then is that they differ). A part of :data:`SUPERSEDED` is
    compared only when either key lacks its successor (a record from before). ``only``: the
    parts compared (all by default)."""
    a, b = _parts(before), _parts(now)
    skip = {old if new in a and new in b else new for old, new in SUPERSEDED.items()}
    changed = [JOB_PARTS[k] for k in JOB_PARTS
               if k not in skip and k in a and k in b and a[k] != b[k]
               and (only is None or k in only)]
    return list(dict.fromkeys(changed))


def photo_parts(before: str, now: str) -> tuple[str, ...]:
    """The parts of two :func:`job_key` values that decide a photo's pixels: not the video's
    (:data:`VIDEO_PARTS`), and the engine settings without those that act across frames
    (``still``) when both keys have it (a new user's trial: ``--detect-every 2`` remade a
    batch's photos, byte-identical)."""
    keys: tuple[str, ...] = ("settings", "engine", "photos")
    if "still" in _parts(before) and "still" in _parts(now):
        keys = ("still", "photos")
    return keys


def same_job(before: str, now: str) -> bool | None:
    """Whether two :func:`job_key` values are the same job (:func:`job_changes` finds nothing);
    ``None`` when they cannot be compared part by part (one from a livefuse whose key had
    other parts)."""
    if before == now:
        return True
    a, b = _parts(before), _parts(now)
    if not a or not b:
        return False
    if set(a) != set(b):
        return None
    return not job_changes(before, now)


@dataclass
class UnitResult:
    """What became of one unit.

    Attributes:
        unit: the unit.
        ok: its output was written (a chunk: its chunk file).
        message: why not, one line naming the file and the problem.
        frames: frames written; faces_found, faces_swapped: as in ``run``'s summary.
        incomplete: the input ended early (the output holds what was decoded).
        bad_packets, failures: video packets skipped as undecodable, and where
            (:attr:`livefuse.run.RunSummary.failures`).
        seconds: wall time on the worker.
        worker: the worker's name.
        notes: the run's notes (encoder, decoder, audio).
        input_notes: those on the target's content (:attr:`livefuse.run.RunSummary.input_notes`).
        engine_notes: on a worker's first unit, what its engine said about the source and
            reference photos (``source: ...``), as ``run`` prints them.
        skipped: why the faces found were not swapped (:attr:`livefuse.run.RunSummary.skipped`).
        processed: frames this unit ran through the engine, failed or not (a video with no face
            is decoded and searched in full before it fails).
        lasting: the failure is the input's own under these settings (no face was swapped),
            not the machine's: a rerun of the same job on the same input skips the item
            (:func:`livefuse.batch.made_from.failed_before`).
    """

    unit: Unit
    ok: bool
    message: str = ""
    frames: int = 0
    faces_found: int = 0
    faces_swapped: int = 0
    incomplete: str | None = None
    bad_packets: int = 0
    failures: tuple[Fraction, ...] = ()
    seconds: float = 0.0
    worker: str = ""
    notes: tuple[str, ...] = ()
    input_notes: tuple[str, ...] = ()
    lasting: bool = False
    skipped: tuple[str, ...] = ()
    processed: int = 0
    engine_notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerInfo:
    """Where a worker runs.

    Attributes:
        name: ``w0``, ``w1``...; pid, host: its process and machine.
        gpu_ids: the GPUs Ray assigned it (empty for CPU workers and the in-process pool).
        cuda_visible_devices: its ``CUDA_VISIBLE_DEVICES`` (``None`` when unset).
        node: Ray node id (``local`` in-process).
    """

    name: str
    pid: int
    host: str
    gpu_ids: tuple[str, ...] = ()
    cuda_visible_devices: str | None = None
    node: str = "local"


@dataclass
class WorkerStats:
    """A worker's totals, read at the end of the batch."""

    info: WorkerInfo
    units: int = 0
    frames: int = 0
    busy_s: float = 0.0
    peak_vram_mib: float | None = None
    device: str = "cpu"
    errors: list[str] = field(default_factory=list)
    stage_s: dict[str, float] = field(default_factory=dict)
    """Seconds each stage of its videos' chains worked (decode ``source``, ``stage``,
    ``process``, ``convert``, encode ``sink``), summed over its units: the busiest one is what
    held this worker back."""

    def busiest(self) -> str:
        """``"encode 8.1 s"``: the stage that worked longest, or ``""`` when no video ran."""
        if not self.stage_s:
            return ""
        stage, seconds = max(self.stage_s.items(), key=lambda kv: kv[1])
        return f"{STAGE_NAMES.get(stage, stage)} {seconds:.1f} s"


STAGE_NAMES = {"source": "decode", "stage": "upload", "sink": "encode"}
"""The video chain's stage names (:mod:`livefuse.io.pipeline`) as a user reads them."""


CODEC_THREADS_PER_CPU = 1.5
"""Decoder and encoder threads per CPU of a worker's share: x264's own rule (its frame threads
wait on each other's rows). On the H200 (16 cores), four workers of 4 CPUs ran 150-164 fps with 6
threads each, 136-139 with 4 and 143 with 8 (docs/BENCHMARKS.md §13)."""


def codec_threads(cpus: float) -> int:
    """Decoder and encoder threads for a worker with a share of ``cpus`` CPUs (at least 1)."""
    return max(1, math.floor(CODEC_THREADS_PER_CPU * cpus + 0.5))


def item_problem(exc: LivefuseError, item: Path) -> str:
    """``exc`` as the message of an item's failure line. The line names the item first
    (``failed: PATH: ...``), so an error about that very file keeps only its problem: the file
    came twice before (``failed: a.mp4: video 'a.mp4': cannot open: ...``). Any other error
    (the output's, a chunk's) keeps the file it names."""
    if isinstance(exc, (VideoError, ImageLoadError)) and \
            exc.path.absolute() == Path(item).absolute():
        return exc.problem
    return str(exc)


class BatchWorker:
    """Turns units into output files.

    Args:
        factory: builds the engine (an :class:`EngineSpec`, or any callable returning an
            :class:`~livefuse.engine.Engine`: benchmarks inject scripted ones); called once, on
            the first unit.
        video: how videos are decoded and encoded.
        name: shown in the summary and the placement table.
        gpu_ids: the GPUs this worker was given (Ray fills it in the actor).
        node: where it runs (Ray's node id).
        cpus: this worker's CPU share (a Ray actor's, may be fractional): as many OpenCV
            threads (at least 1), and :data:`CODEC_THREADS_PER_CPU` times as many decoder and
            encoder threads unless ``video.threads`` names them; ``None`` leaves both.

    :meth:`run` is called from one thread at a time; :meth:`frames_done`, :meth:`mem_info` and
    :meth:`stats` may be called from another while it runs.
    """

    def __init__(self, factory: Callable[[], Any], video: VideoOptions | None = None,
                 name: str = "w0", gpu_ids: tuple[str, ...] = (), node: str = "local",
                 cpus: float | None = None) -> None:
        self.factory, self.video = factory, video or VideoOptions()
        if cpus is not None:
            import cv2

            cv2.setNumThreads(max(1, math.floor(cpus + 0.5)))  # as codec_threads rounds
            if not self.video.threads:
                self.video = replace(self.video, threads=codec_threads(cpus))
        self.info = WorkerInfo(name, os.getpid(), socket.gethostname(), gpu_ids,
                               os.environ.get("CUDA_VISIBLE_DEVICES"), node)
        self._engine: Any = None
        self._noted = False  # the engine's notes went out with a result
        self._frames = 0
        self._stats = WorkerStats(self.info)
        self.cancel = threading.Event()

    @property
    def engine(self) -> Any:
        if self._engine is None:
            self._engine = self.factory()
            self._stats.device = str(getattr(self._engine.renderer, "device", "cpu"))
        return self._engine

    def frames_done(self) -> int:
        """Frames written so far over every unit (progress; any thread)."""
        return self._frames

    def where(self) -> WorkerInfo:
        return self.info

    def device(self) -> str:
        """The engine's device once built (``cpu``, ``cuda``, ``cuda:0``...), else ``cpu``."""
        return self._stats.device

    def mem_info(self) -> tuple[int, int] | None:
        """``(free, total)`` bytes of this worker's GPU (``torch.cuda.mem_get_info``), or ``None``
        for a CPU worker; the dispatcher's VRAM admission reads it."""
        device = self._stats.device if self._engine is not None else \
            ("cuda" if self.info.gpu_ids else "cpu")
        if not device.startswith("cuda"):
            return None
        try:
            import torch

            if not torch.cuda.is_available():
                return None
            free, total = torch.cuda.mem_get_info(torch.device(device))
        except Exception:  # no driver: nothing to admit against
            return None
        return int(free), int(total)

    def stats(self) -> WorkerStats:
        """Units, frames, busy time and the peak VRAM torch reserved in this process."""
        import sys

        torch: Any = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and \
                self._stats.device.startswith("cuda"):
            self._stats.peak_vram_mib = torch.cuda.max_memory_reserved() / 2**20
        return self._stats

    def run(self, unit: Unit) -> UnitResult:
        """Write ``unit.output``; never raises for the input's faults.

        Raises:
            Cancelled: :attr:`cancel` was set while a video ran (its part file is removed).
        """
        t0 = time.perf_counter()
        result = UnitResult(unit, ok=False, worker=self.info.name)
        before = self._frames
        try:
            self._run(unit, result)
        except (Cancelled, KeyboardInterrupt):
            raise
        except LivefuseError as exc:
            result.message = item_problem(exc, unit.item.input)
            result.lasting = isinstance(exc, NothingSwappedError)
        except OSError as exc:  # the machine's answer (a read-only disk, a full one): no bug
            where = f" '{exc.filename}'" if exc.filename else ""
            # the failure line names the item already (``failed: PATH: ...``)
            result.message = f"cannot write{where}: {exc.strerror or exc}"
        except Exception as exc:  # a bug must cost one item, not the batch; say where it was
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            result.message = (f"internal error: {type(exc).__name__}: {exc} "
                              f"({Path(tb.filename).name}:{tb.lineno})")
        if not self._noted and self._engine is not None:
            self._noted = True
            result.engine_notes = (
                tuple(f"source: {n}" for n in self._engine.source_notes)
                + tuple(f"reference: {n}" for n in self._engine.reference_notes))
        result.seconds = time.perf_counter() - t0
        result.processed = self._frames - before
        self._stats.units += 1
        self._stats.busy_s += result.seconds
        self._stats.frames += result.frames
        if not result.ok:
            self._stats.errors.append(result.message)
        return result

    def _run(self, unit: Unit, result: UnitResult) -> None:
        from livefuse.run import check_output_path, run_image, run_video

        item = unit.item
        check_output_path(unit.output, {"target": item.input})
        engine = self.engine
        # made here, not by the video writer: a writer removes the folders it made when its item
        # fails, and another worker may be writing into the same one (the runner removes what
        # is left empty at the end)
        unit.output.parent.mkdir(parents=True, exist_ok=True)
        if item.kind == "image":
            summary = run_image(engine, item.input, unit.output)
            self._frames += 1
        else:
            base = self._frames

            def count(n: int) -> None:
                self._frames = base + n

            summary = run_video(engine, item.input, unit.output, progress=False,
                                video=self.video, span=unit.span, on_frame=count,
                                cancel=self.cancel)
            result.incomplete = summary.incomplete
            result.bad_packets, result.failures = summary.bad_packets, summary.failures
            if summary.stats is not None:
                for stage, seconds in summary.stats.busy_s.items():
                    self._stats.stage_s[stage] = self._stats.stage_s.get(stage, 0.0) + seconds
        result.ok = True
        result.frames = summary.frames
        result.faces_found, result.faces_swapped = summary.faces_found, summary.faces_swapped
        result.skipped = summary.skipped
        result.notes, result.input_notes = summary.notes, summary.input_notes


__all__ = ["CODEC_THREADS_PER_CPU", "SUPERSEDED", "VIDEO_PARTS", "BatchWorker", "EngineSpec",
           "UnitResult", "WorkerInfo", "WorkerStats", "codec_threads", "job_changes", "job_key",
           "photo_parts", "same_job"]
