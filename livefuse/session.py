"""Session: the Qt-free composition root of a live session, driven by ``livefuse live`` and by the
desktop app alike.

One frozen :class:`~livefuse.config.AppConfig` (capture, engine, cache, output) describes the
session; the session builds the frame source, the engine and the sinks from it and runs them on a
:class:`~livefuse.live.LiveRunner`. A new config handed to :meth:`Session.apply` is diffed:

* engine and cache settings go to the runner, which takes them at the next frame boundary (in
  place when no model must be loaded again; a model reload is debounced);
* an output change adds or removes sinks at a frame boundary (the inference thread is the only
  one that ever iterates over them); removed sinks are closed after they were let go;
* a capture change swaps the frame source while the engine keeps running.

Every method is safe from any one controlling thread (the GUI thread, the CLI's main thread);
status lines and preview frames arrive on the runner's threads.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from livefuse.config import AppConfig, CaptureConfig, OutputConfig
from livefuse.imaging import LoadedImage
from livefuse.io.sinks import PreviewSink, RecorderSink, Sink, VirtualCameraSink
from livefuse.io.sources import (
    CameraSource,
    Source,
    TestPatternSource,
    VideoFileSource,
)
from livefuse.live import EngineFactory, EngineLike, LiveRunner, default_engine_factory
from livefuse.metrics import Metrics
from livefuse.types import Face, Frame

StatusFn = Callable[[str], None]
FrameFn = Callable[[Frame, int], None]


def build_source(capture: CaptureConfig) -> Source:
    """The frame source a :class:`CaptureConfig` describes (opened later, on the capture thread).

    Raises:
        VideoError: ``kind='video'`` without a file.
    """
    if capture.kind == "video":
        if not capture.video:
            from livefuse.errors import VideoError

            raise VideoError("-", "no video file chosen for the video input")
        return VideoFileSource(capture.video, loop=capture.loop)
    if capture.kind == "test pattern":
        return TestPatternSource(capture.width, capture.height, capture.fps)
    device: int | str = int(capture.camera) if capture.camera.isdigit() else capture.camera
    return CameraSource(device, capture.width, capture.height, capture.fps)


@dataclass(frozen=True)
class _SinkKey:
    kind: str
    detail: tuple[Any, ...] = ()


def _wanted(capture: CaptureConfig, output: OutputConfig, preview: bool) -> list[_SinkKey]:
    keys = []
    if preview:
        keys.append(_SinkKey("preview"))
    if output.virtual_camera:
        keys.append(_SinkKey("vcam", (capture.width, capture.height, capture.fps,
                                      output.vcam_device)))
    if output.record:
        keys.append(_SinkKey("record", (output.record, capture.fps)))
    return keys


class Session:
    """A live session: capture → engine → sinks, built from one :class:`AppConfig`.

    Args:
        config: the starting settings (validated here).
        on_status: status lines (``camera lost``, ``virtual camera missing: ...``); called from
            the runner's threads.
        on_frame: the preview: ``(frame (H, W, 3) uint8 BGR, t_capture_ns)`` for the newest
            frame, on the preview sink's own thread (a busy preview drops, never queues).
        metrics: where measurements go (a new :class:`Metrics` by default).
        engine_factory: ``AppConfig -> engine``, called on the inference thread (or by
            :meth:`prepare` on the caller's).
        source_factory: ``CaptureConfig -> Source`` (tests inject fakes).
        vcam_backend: pyvirtualcam backend name for the virtual camera (``None``: the OS's own).

    Raises:
        ConfigError: invalid settings.
    """

    def __init__(self, config: AppConfig, *, on_status: StatusFn | None = None,
                 on_frame: FrameFn | None = None, metrics: Metrics | None = None,
                 engine_factory: EngineFactory = default_engine_factory,
                 source_factory: Callable[[CaptureConfig], Source] = build_source,
                 vcam_backend: str | None = None) -> None:
        self._config = config.validate()
        self._on_status = on_status or (lambda s: None)
        self._on_frame = on_frame
        self.metrics = metrics or Metrics()
        self._engine_factory = engine_factory
        self._source_factory = source_factory
        self._vcam_backend = vcam_backend
        self._engine: EngineLike | None = None
        self._source_face: LoadedImage | None = None
        self._face: Face | None = None
        self._face_index: int | None = None
        self._runner: LiveRunner | None = None
        self._sinks: dict[_SinkKey, Sink] = {}
        self._clock: VideoFileSource | None = None
        self._lock = threading.Lock()

    # -- state ----------------------------------------------------------------------------------
    @property
    def config(self) -> AppConfig:
        return self._config

    @property
    def running(self) -> bool:
        return self._runner is not None

    @property
    def runner(self) -> LiveRunner | None:
        return self._runner

    @property
    def engine(self) -> EngineLike | None:
        """The engine in use (``None`` until built)."""
        runner = self._runner
        return runner.engine if runner is not None else self._engine

    @property
    def precision_in_use(self) -> str:
        """What the engine really runs (``fp16``, ``fp32 (fallback)``, ``n/a (classic
        engine)``), or the requested precision before the engine exists."""
        engine = self.engine
        if engine is not None:
            return engine.precision_in_use
        if self._config.engine.engine == "classic":
            return "n/a (classic engine)"
        return f"{self._config.engine.precision} (requested)"

    @property
    def statuses(self) -> list[str]:
        runner = self._runner
        return runner.statuses if runner is not None else []

    @property
    def source_ended(self) -> bool:
        runner = self._runner
        return runner is not None and runner.source_ended

    @property
    def capture_failed(self) -> str | None:
        """Why the capture gave up (``max_open_attempts`` reached), or ``None``."""
        runner = self._runner
        return runner.capture_failed if runner is not None else None

    @property
    def sinks(self) -> list[Sink]:
        """The sinks of the running session (preview, virtual camera, recorder)."""
        return list(self._sinks.values())

    def _status(self, line: str) -> None:
        with contextlib.suppress(Exception):
            self._on_status(line)

    # -- setup ----------------------------------------------------------------------------------
    def set_source_face(self, image: LoadedImage, face: Face | None = None,
                        face_index: int | None = None) -> None:
        """Use a face of ``image`` as the source: ``face`` (a face found by another detector,
        e.g. the app's picker: the engine uses its own detection at that place), or
        ``face_index`` (left to right), or by default the engine's own choice. Taken at the next
        frame boundary when running (errors then arrive as an ``engine error`` status); when not
        running and the engine was prepared, taken now.

        Raises:
            NoFaceError / FaceIndexError: (prepared, not running) no usable face.
        """
        self._source_face, self._face, self._face_index = image, face, face_index
        runner = self._runner
        if runner is not None:
            runner.apply(source_face=image, face=face, face_index=face_index)
        elif self._engine is not None:
            self._engine.set_source(image, face_index, face)

    def prepare(self) -> EngineLike:
        """Build the engine now, on the calling thread, and set the source face if one was
        given, so a bad model or a photo without a face fails here, with its own error, before
        any device opens (``livefuse live`` calls it; the app lets the runner build it).

        Raises:
            LivefuseError: a model is missing or corrupt, the photo has no usable face, ...
        """
        if self._engine is None:
            self._engine = self._engine_factory(self._config)
        if self._source_face is not None:
            self._engine.set_source(self._source_face, self._face_index, self._face)
        return self._engine

    def _make_sink(self, key: _SinkKey) -> Sink:
        if key.kind == "preview":
            assert self._on_frame is not None
            return PreviewSink(self._on_frame, on_status=self._status)
        if key.kind == "vcam":
            w, h, fps, device = key.detail
            return VirtualCameraSink(w, h, fps, device=device, backend=self._vcam_backend,
                                     on_status=self._status)
        path, fps = key.detail
        # a video file input: the recording keeps the file's timestamps and audio
        return RecorderSink(path, fps=fps, on_status=self._status, clock=self._clock)

    def _sync_sinks(self) -> list[Sink]:
        """Make the sink set match the config; returns the sinks to close once let go of."""
        wanted = _wanted(self._config.capture, self._config.output, self._on_frame is not None)
        removed = [s for k, s in self._sinks.items() if k not in wanted]
        self._sinks = {k: self._sinks.get(k) or self._make_sink(k) for k in wanted}
        return removed

    # -- running --------------------------------------------------------------------------------
    def start(self) -> None:
        """Open the source and the sinks and start the threads (returns at once: the source
        opens on the capture thread, the engine is built on the inference thread unless
        :meth:`prepare` built it).

        Raises:
            LivefuseError: the source cannot be described (a video input without a file), or a
                sink cannot be made (a recording path with an unsupported suffix).
        """
        with self._lock:
            if self._runner is not None:
                return
            source = self._source_factory(self._config.capture)
            self._clock = source if isinstance(source, VideoFileSource) else None
            self._sync_sinks()
            engine, factory = (self._engine, None) if self._engine is not None else \
                (None, self._engine_factory)
            runner = LiveRunner(engine, source, list(self._sinks.values()), self._config,
                                source_face=self._source_face, face_index=self._face_index,
                                face=self._face, on_status=self._status, metrics=self.metrics,
                                factory=factory,
                                max_open_attempts=self._config.capture.max_open_attempts)
            runner.start()
            self._runner = runner

    def stop(self, timeout: float = 1.0) -> bool:
        """Stop the threads and close every sink (a recording is finished and renamed).

        Returns:
            ``True`` when every thread ended within ``timeout`` s.
        """
        with self._lock:
            runner, self._runner = self._runner, None
            sinks, self._sinks = list(self._sinks.values()), {}
        ok = True
        if runner is not None:
            ok = runner.stop(timeout)
            if runner.engine is not None:
                self._engine = runner.engine  # a restart reuses the loaded models
        for sink in sinks:
            try:
                sink.close()
            except Exception as exc:  # a recorder that cannot finish must not hide the others
                self._status(f"{sink.name} failed to close: {exc}")
        return ok

    def _update_prepared(self, old: AppConfig, config: AppConfig) -> None:
        # A stopped session keeps its engine for the next start (which hands it to the runner
        # as is): settings changed meanwhile must reach it, in place or by a rebuild at start.
        engine = self._engine
        if engine is None:
            return
        if config.cache != old.cache:
            engine.set_cache(config.cache)
        if config.engine != old.engine and not engine.apply(config.engine):
            self._engine = None

    def apply(self, config: AppConfig) -> None:
        """Take new settings (see the module docstring for what each change does).

        Raises:
            ConfigError: invalid settings (nothing is changed).
            LivefuseError: a new source or sink cannot be made (the old one keeps running).
        """
        config = config.validate()
        with self._lock:
            old, self._config = self._config, config
            runner = self._runner
            if runner is None:
                self._update_prepared(old, config)
                return
            if config.capture != old.capture:
                source = self._source_factory(config.capture)
                self._clock = source if isinstance(source, VideoFileSource) else None
                runner.replace_source(source, config.capture.max_open_attempts)
            runner.apply(config)
            if config.output != old.output or config.capture != old.capture:
                removed = self._sync_sinks()
                runner.set_sinks(list(self._sinks.values()))
            else:
                removed = []
        if removed:
            def close_when_let_go() -> None:
                runner.sinks_taken(2.0)
                for sink in removed:
                    with contextlib.suppress(Exception):
                        sink.close()

            threading.Thread(target=close_when_let_go, name="livefuse-sink-close",
                             daemon=True).start()


__all__ = ["Session", "build_source"]
