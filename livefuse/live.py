"""LiveRunner: capture thread -> LatestSlot -> inference thread -> sinks (design.md section 3).

The capture thread only reads frames and stamps them (``time.perf_counter_ns``); the inference
thread runs the Engine and hands each packet to every sink. Between them sits one slot: when the
engine is slower than the camera, older frames are dropped (and counted), so latency stays
bounded by about one capture period plus one processing time. Settings arrive as new frozen
values through :meth:`LiveRunner.apply` and are taken at the next frame boundary.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from livefuse.config import AppConfig
from livefuse.imaging import LoadedImage
from livefuse.io.sinks import Sink
from livefuse.io.sources import Capture, Source
from livefuse.metrics import Metrics
from livefuse.slot import LatestSlot, SlotClosed
from livefuse.types import Frame, FramePacket

_POLL_S = 0.25  # how often the inference thread wakes without frames (watchdog, stop)


class EngineLike(Protocol):
    """What the runner needs from an engine (:class:`livefuse.engine.Engine` has it)."""

    def set_source(self, image: LoadedImage, face_index: int | None = None) -> Any: ...
    def process(self, frame: Frame, index: int = 0, t_capture_ns: int | None = None,
                strict: bool = False) -> FramePacket: ...


EngineFactory = Callable[[AppConfig], EngineLike]


def default_engine_factory(config: AppConfig) -> EngineLike:
    """The project's Engine for ``config`` (classic; others when their engine is available)."""
    from livefuse.engine import Engine

    return Engine(config.engine, cache=config.cache)


@dataclass
class _Pending:
    config: AppConfig | None = None
    source_face: LoadedImage | None = None
    face_index: int | None = None


class LiveRunner:
    """Runs a live session; ``start``, ``stop`` and ``apply`` are safe from any thread.

    Args:
        engine: an engine instance, or a factory ``AppConfig -> engine`` (then engine settings
            can change live: the engine is rebuilt on the inference thread).
        source: where frames come from; opened on the capture thread.
        sinks: receive every processed frame (``send(frame, t_capture_ns)``).
        config: the starting settings.
        source_face: the source face photo; set on the engine before the first frame.
        face_index: which face of that photo (left to right from 0); ``None``: the largest.
        on_status: status lines (``camera lost: ...``, ``virtual camera missing: ...``,
            ``engine error: ...``); called from the runner's threads.
        metrics: where measurements go; a new :class:`Metrics` by default.
    """

    def __init__(self, engine: EngineLike | EngineFactory, source: Source,
                 sinks: Sequence[Sink] = (), config: AppConfig | None = None,
                 source_face: LoadedImage | None = None, face_index: int | None = None,
                 on_status: Callable[[str], None] | None = None,
                 metrics: Metrics | None = None) -> None:
        self.config = (config or AppConfig()).validate()
        if callable(engine) and not hasattr(engine, "process"):
            self._factory: EngineFactory | None = engine
            self._engine: EngineLike | None = None
        else:
            self._factory = None
            self._engine = engine  # type: ignore[assignment]
        self.source = source
        self.sinks = list(sinks)
        self.metrics = metrics or Metrics()
        self._on_status = on_status or (lambda s: None)
        self._source_face = source_face
        self._face_index = face_index
        self._pending = _Pending(source_face=source_face, face_index=face_index)
        self._lock = threading.Lock()  # guards _pending, start/stop
        self._slot: LatestSlot[tuple[Frame, int]] | None = None
        self._capture: Capture | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._index = 0
        self.statuses: list[str] = []
        self.errors = 0
        self.frames_out = 0

    # -- control --------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def engine(self) -> EngineLike | None:
        return self._engine

    @property
    def source_ended(self) -> bool:
        return self._capture is not None and self._capture.ended

    def status(self, line: str) -> None:
        self.statuses.append(line)
        del self.statuses[:-100]
        with contextlib.suppress(Exception):  # a broken UI callback must not stop frames
            self._on_status(line)

    def start(self) -> None:
        """Start capture and inference (no effect when running). Returns at once."""
        with self._lock:
            if self.running:
                return
            self._stop.clear()
            slot: LatestSlot[tuple[Frame, int]] = LatestSlot()
            self._slot = slot

            def on_frame(frame: Frame, t_ns: int) -> None:
                self.metrics.frame_in()
                slot.put((frame, t_ns))

            self._capture = Capture(self.source, on_frame, self.status)
            self._thread = threading.Thread(target=self._run, name="livefuse-inference",
                                            daemon=True)
            self._capture.start()
            self._thread.start()

    def stop(self, timeout: float = 1.0) -> bool:
        """Stop both threads, waiting at most ``timeout`` s in total.

        Returns:
            ``True`` when every thread ended; ``False`` when the capture thread is still inside
            a blocking driver call (a daemon: it ends when that call returns, and the source is
            closed then).
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            self._stop.set()
            if self._slot is not None:
                self._slot.close()
            t = self._thread
            if t is not None:
                t.join(max(0.0, deadline - time.monotonic()))
            cap_ok = True
            if self._capture is not None:
                cap_ok = self._capture.stop(max(0.0, deadline - time.monotonic()))
            return cap_ok and (t is None or not t.is_alive())

    def apply(self, config: AppConfig | None = None,
              source_face: LoadedImage | None = None, face_index: int | None = None) -> None:
        """Hand over new settings and/or a new source face (and which of its faces, left to
        right; ``None``: the largest); taken at the next frame boundary.

        Raises:
            ConfigError: ``config`` is invalid (checked here, on the caller's thread).
        """
        if config is not None:
            config.validate()
        with self._lock:
            if config is not None:
                self._pending.config = config
            if source_face is not None:
                self._pending.source_face = source_face
                self._pending.face_index = face_index

    # -- the inference thread -------------------------------------------------------------------
    def _take_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, _Pending()
        cfg = pending.config
        face = pending.source_face
        if face is not None:
            self._source_face, self._face_index = face, pending.face_index
        rebuild = self._engine is None
        if cfg is not None:
            old, self.config = self.config, cfg
            if cfg.engine != old.engine:
                rebuild = True
            elif cfg.cache != old.cache and hasattr(self._engine, "set_cache"):
                self._engine.set_cache(cfg.cache)  # type: ignore[union-attr]
        if rebuild and self._factory is not None:
            self._engine = self._factory(self.config)
            face = self._source_face
        elif rebuild and cfg is not None and self._engine is not None:
            self.status("engine settings ignored: this runner was given a fixed engine")
        if face is not None and self._engine is not None:
            self._engine.set_source(face, self._face_index)

    def _run(self) -> None:
        slot, capture = self._slot, self._capture
        assert slot is not None and capture is not None
        try:
            self._take_pending()
        except Exception as exc:
            self.errors += 1
            self.status(f"engine error: {exc}")
        while not self._stop.is_set():
            try:
                item = slot.get(timeout=_POLL_S)
            except SlotClosed:
                return
            capture.watch()
            self.metrics.set_dropped("capture->engine", slot.dropped)
            if item is None:
                continue
            frame, t_cap = item
            try:
                self._take_pending()
                if self._engine is None:
                    continue
                packet = self._engine.process(frame, self._index, t_cap)
            except Exception as exc:
                self.errors += 1
                self.status(f"engine error: {exc}")
                continue
            finally:
                self._index += 1
            self.metrics.frame_processed(packet.timings_ms)
            stats = getattr(getattr(self._engine, "cache", None), "stats", None)
            if stats is not None:
                self.metrics.set_cache(stats.hits, stats.misses, stats.forced_refreshes)
            out = packet.output if packet.output is not None else frame
            for sink in self.sinks:
                if self._stop.is_set():
                    return
                try:
                    sink.send(out, t_cap)
                except Exception as exc:
                    self.errors += 1
                    self.status(f"sink {sink.name} failed: {exc}")
                self.metrics.set_dropped(f"->{sink.name}", sink.dropped)
            self.frames_out += 1
            self.metrics.frame_out(t_cap)


__all__ = ["EngineFactory", "EngineLike", "LiveRunner", "default_engine_factory"]
