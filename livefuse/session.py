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

On stream (design.md §9): :meth:`Session.switch_preset` switches to a named preset
(:mod:`livefuse.presets`) at a frame boundary, all or nothing, with the camera and the virtual
camera left open; :meth:`Session.set_swap` and :meth:`Session.set_guard` toggle the swap and the
privacy guard; :meth:`Session.open_control` serves the local control API
(:mod:`livefuse.control`), which drives these same methods.

Every method is safe from any one controlling thread (the GUI thread, the CLI's main thread);
the switch, swap, guard and status methods also from the control API's request threads. Status
lines and preview frames arrive on the runner's threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from livefuse.config import AppConfig, CaptureConfig, EngineConfig, GuardMode, OutputConfig
from livefuse.errors import ConfigError, LivefuseError
from livefuse.imaging import LoadedImage, is_image_path, load_image
from livefuse.io.paths import check_output
from livefuse.io.sinks import PreviewSink, RecorderSink, Sink, VirtualCameraSink
from livefuse.io.sources import (
    CameraSource,
    ImageSource,
    Source,
    TestPatternSource,
    VideoFileSource,
)
from livefuse.live import (
    EngineFactory,
    EngineLike,
    LiveRunner,
    default_engine_factory,
    for_engine,
)
from livefuse.metrics import Metrics
from livefuse.models.engine_choice import resolve_engine
from livefuse.presets import Preset, PresetError, PresetSource, PresetStore
from livefuse.types import Face, Frame

if TYPE_CHECKING:
    from livefuse.control import ControlServer

StatusFn = Callable[[str], None]
FrameFn = Callable[[Frame, int], None]

_PHOTOS_KEPT = 16  # decoded preset photos kept (a few MB each)
SWITCH_TIMEOUT_S = 30.0
"""How long a preset or source switch waits for the inference thread (a frame, plus a model
load when the preset changes the models) before it reports a time-out."""


def build_source(capture: CaptureConfig) -> Source:
    """The frame source a :class:`CaptureConfig` describes (opened later, on the capture thread;
    a still image standing in for the camera is read now, on the caller's thread).

    Raises:
        VideoError: ``kind='video'`` without a file.
        ImageLoadError: a still image that cannot be read.
    """
    if capture.kind == "video":
        if not capture.video:
            from livefuse.errors import VideoError

            raise VideoError("-", "no video file chosen for the video input")
        if is_image_path(capture.video):  # a still, upright as `run` reads it (EXIF applied:
            # FFmpeg's image decoders ignore it, and a new user's trial streamed a photo sideways)
            still = load_image(capture.video)
            return ImageSource(still.bgr, capture.fps, Path(capture.video).name)
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

        presets: the preset folder (the user config dir's ``presets`` by default).
        token_file: the control API's token file (:func:`livefuse.control.token_path`, in the
            user config dir, by default; the app keeps it beside its own settings file).

    Raises:
        ConfigError: invalid settings.
    """

    def __init__(self, config: AppConfig, *, on_status: StatusFn | None = None,
                 on_frame: FrameFn | None = None, metrics: Metrics | None = None,
                 engine_factory: EngineFactory = default_engine_factory,
                 source_factory: Callable[[CaptureConfig], Source] = build_source,
                 vcam_backend: str | None = None,
                 presets: PresetStore | None = None, token_file: Path | None = None) -> None:
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
        self._reference: LoadedImage | None = None
        self._runner: LiveRunner | None = None
        self._stopping: LiveRunner | None = None  # stopped, its inference thread not yet ended
        self.sink_errors: list[str] = []
        """Why a sink failed to finish at the last :meth:`stop` (a recording not written)."""
        self._sinks: dict[_SinkKey, Sink] = {}
        self._clock: VideoFileSource | None = None
        self._lock = threading.Lock()
        self.presets = presets or PresetStore()
        self._switch_lock = threading.Lock()  # one switch at a time, whoever asks
        self._active: tuple[str, tuple[Any, ...]] | None = None
        self._photos: dict[tuple[str, int, int], LoadedImage] = {}
        self._swap = True
        self._control: ControlServer | None = None
        self._token_file = token_file
        self._revision = 0

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
    def engine_in_use(self) -> str:
        """The engine that runs (``classic`` or ``neural``): the built engine's, or before one
        is built what the settings resolve to (``auto`` against the models installed)."""
        engine = self.engine
        if engine is not None:
            return engine.engine_choice.engine
        return resolve_engine(self._config.engine).engine

    @property
    def precision_in_use(self) -> str:
        """What the engine really runs (``fp16``, ``fp32 (fallback)``, ``n/a (classic
        engine)``), or the requested precision before the engine exists."""
        engine = self.engine
        if engine is not None:
            return engine.precision_in_use
        if self.engine_in_use == "classic":  # "auto" too, when it resolves to classic
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
    def source_incomplete(self) -> str | None:
        """Why the video file input ended before its end, or ``None`` (see
        :attr:`livefuse.live.LiveRunner.source_incomplete`)."""
        runner = self._runner
        return runner.source_incomplete if runner is not None else None

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

    def check_outputs(self, config: AppConfig | None = None, *,
                      source_face: LoadedImage | None = None,
                      reference: LoadedImage | None = None) -> None:
        """Refuse a recording path that is one of the session's inputs (the video standing in
        for the camera, the source photo, the reference photo, any stored preset's photo),
        however it is spelled
        (:func:`livefuse.io.paths.check_output`). ``config``, ``source_face`` and ``reference``
        default to the session's own; :meth:`start`, :meth:`apply`, :meth:`prepare`,
        :meth:`set_source_face` and :meth:`set_reference` call it before they change anything.

        Raises:
            OutputIsInputError: naming the recording and the input it would overwrite.
        """
        config = config or self._config
        if not config.output.record:
            return
        source_face = source_face or self._source_face
        reference = reference or self._reference
        capture = config.capture
        # every preset's photo too: the control API and the app switch to any of them (a new
        # user's recording replaced another preset's photo, named with a video suffix, exit 0)
        presets: dict[str, str | None] = {f"preset {p.name}'s photo": p.source.path
                                          for p in self.presets.list() if isinstance(p, Preset)}
        check_output(config.output.record, {
            "video input": capture.video if capture.kind == "video" else None,
            "source photo": None if source_face is None else source_face.path,
            "reference photo": None if reference is None else reference.path,
            **presets,
        }, what="recording", replacing=False)  # the recorder refuses a protected file: the
        # app records to a free name, and an old protected recording must not refuse Start

    def _check_reference(self, config: AppConfig) -> None:
        if config.engine.face_selector == "reference" and self._reference is None:
            raise ConfigError("the reference face selector needs a reference photo (the face "
                              "to swap is the one nearest to it; `livefuse live --reference "
                              "PHOTO`)")

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
            OutputIsInputError: the recording path is this photo.
        """
        self.check_outputs(source_face=image)
        self._source_face, self._face, self._face_index = image, face, face_index
        self._revision += 1
        runner = self._runner
        if runner is not None:
            runner.apply(source_face=image, face=face, face_index=face_index)
        elif self._engine is not None:
            self._engine.set_source(image, face_index, face)

    def set_reference(self, image: LoadedImage) -> None:
        """Use the largest face of ``image`` as the person that ``face_selector='reference'``
        swaps (the face nearest to it by embedding). Taken like :meth:`set_source_face`: at the
        next frame boundary when running, now when the engine was prepared, and again on every
        engine rebuild.

        Raises:
            NoFaceError: (prepared, not running) the photo has no face.
            OutputIsInputError: the recording path is this photo.
        """
        self.check_outputs(reference=image)
        runner = self._runner
        if runner is None and self._engine is not None:
            self._engine.set_reference(image)  # a photo without a face is refused, not kept
        self._reference = image
        if runner is not None:
            runner.apply(reference=image)

    def prepare(self) -> EngineLike:
        """Build the engine now, on the calling thread, and set the source face if one was
        given, so a bad model or a photo without a face fails here, with its own error, before
        any device opens (``livefuse live`` calls it; the app lets the runner build it).

        Raises:
            LivefuseError: a model is missing or corrupt, the photo has no usable face, the
                recording would overwrite an input, the reference selector has no reference...
        """
        self.check_outputs()
        self._check_reference(self._config)
        if self._engine is None:
            self._engine = self._engine_factory(for_engine(self._config))
        if self._source_face is not None:
            self._engine.set_source(self._source_face, self._face_index, self._face)
        if self._reference is not None:
            self._engine.set_reference(self._reference)
        return self._engine

    def _make_sink(self, key: _SinkKey, clock: VideoFileSource | None) -> Sink:
        if key.kind == "preview":
            assert self._on_frame is not None
            return PreviewSink(self._on_frame, on_status=self._status)
        if key.kind == "vcam":
            w, h, fps, device = key.detail
            return VirtualCameraSink(w, h, fps, device=device, backend=self._vcam_backend,
                                     on_status=self._status)
        path, fps = key.detail
        # a video file input: the recording keeps the file's timestamps and audio
        return RecorderSink(path, fps=fps, on_status=self._status, clock=clock)

    def _sinks_for(self, config: AppConfig, clock: VideoFileSource | None
                   ) -> tuple[dict[_SinkKey, Sink], list[Sink]]:
        """The sink set ``config`` wants (the current sinks kept where they match, the others
        made) and the current ones it drops; nothing is changed here, so a sink that cannot be
        made leaves the session as it was.

        Raises:
            LivefuseError: a sink cannot be made (the ones made for this call are closed).
        """
        wanted = _wanted(config.capture, config.output, self._on_frame is not None)
        removed = [s for k, s in self._sinks.items() if k not in wanted]
        sinks: dict[_SinkKey, Sink] = {}
        try:
            for k in wanted:
                sinks[k] = self._sinks.get(k) or self._make_sink(k, clock)
        except BaseException:
            # a sink that cannot be made (a recording path refused): the ones just made for
            # it go too, or their threads would outlive the failed start
            for k, sink in sinks.items():
                if k not in self._sinks:
                    with contextlib.suppress(Exception):
                        sink.close()
            raise
        return sinks, removed

    # -- running --------------------------------------------------------------------------------
    def start(self) -> None:
        """Open the source and the sinks and start the threads (returns at once: the source
        opens on the capture thread, the engine is built on the inference thread unless
        :meth:`prepare` built it).

        Raises:
            LivefuseError: the source cannot be described (a video input without a file), a
                sink cannot be made (a recording path with an unsupported suffix), the recording
                would overwrite an input (OutputIsInputError), or the reference selector has no
                reference photo (ConfigError).
        """
        # a switch made while stopped works on the prepared engine: not while a runner takes it
        with self._switch_lock, self._lock:
            if self._runner is not None:
                return
            self.check_outputs()
            self._check_reference(self._config)
            source = self._source_factory(self._config.capture)
            self._clock = source if isinstance(source, VideoFileSource) else None
            self._sinks, _ = self._sinks_for(self._config, self._clock)
            self.sink_errors = []
            engine = self._engine
            # a stop that timed out inside a model load: the new runner waits for that thread
            # and takes the engine it was loading, instead of loading a second one beside it
            after, self._stopping = self._stopping, None
            if after is not None and not after.running:
                engine = engine or after.engine
                after = None
            # the factory goes along with a prepared engine: a preset may change the models
            runner = LiveRunner(engine, source, list(self._sinks.values()), self._config,
                                source_face=self._source_face, face_index=self._face_index,
                                face=self._face, on_status=self._status, metrics=self.metrics,
                                factory=self._engine_factory,
                                max_open_attempts=self._config.capture.max_open_attempts,
                                reference=self._reference, after=after)
            runner.swap = self._swap
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
            if runner.running:  # its inference thread is still inside a model load
                self._stopping = runner
        for sink in sinks:
            try:
                sink.close()
            except Exception as exc:  # a recorder that cannot finish must not hide the others
                self._status(f"{sink.name} failed to close: {exc}")
                self.sink_errors.append(f"{sink.name}: {exc}")
        return ok

    def drop_engine(self) -> bool:
        """Let go of the engine kept from :meth:`prepare` or the last run, so that the next
        :meth:`prepare` or :meth:`start` builds one from the settings: the app calls it when
        ``engine='auto'`` resolves to another engine than the kept one was built for (models
        fetched while the app was open). Stopped only.

        Returns:
            ``False`` (nothing changed) while running.
        """
        with self._switch_lock, self._lock:
            if self._runner is not None:
                return False
            self._engine = None
            return True

    def _update_prepared(self, old: AppConfig, config: AppConfig) -> None:
        # A stopped session keeps its engine for the next start (which hands it to the runner
        # as is): settings changed meanwhile must reach it, in place or by a rebuild at start.
        engine = self._engine
        if engine is None:
            return
        if config.cache != old.cache:
            engine.set_cache(config.cache)
        if config.effective_engine() != old.effective_engine() and \
                not engine.apply(config.effective_engine()):
            self._engine = None

    def apply(self, config: AppConfig) -> None:
        """Take new settings (see the module docstring for what each change does; a change of
        ``control`` serves the control API anew when it is enabled, or stops it).

        Raises:
            ConfigError: invalid settings, or the reference selector without a reference photo
                (nothing is changed).
            OutputIsInputError: the new recording path is one of the inputs (nothing is changed).
            LivefuseError: a new source or sink cannot be made (the old one keeps running).
        """
        config = config.validate()
        self.check_outputs(config)
        if self._runner is not None:
            self._check_reference(config)
        with self._lock:
            old, runner = self._config, self._runner
            # what can fail first (a source or a recording that cannot be made): until all is
            # made, the session keeps its settings, its source and its sinks
            source, clock = None, self._clock
            if runner is not None and config.capture != old.capture:
                source = self._source_factory(config.capture)
                clock = source if isinstance(source, VideoFileSource) else None
            sinks: dict[_SinkKey, Sink] | None = None
            removed: list[Sink] = []
            if runner is not None and (config.output != old.output or
                                       config.capture != old.capture):
                sinks, removed = self._sinks_for(config, clock)
            self._config = config
            self._revision += 1
            if runner is None:
                self._update_prepared(old, config)
            else:
                if source is not None:
                    self._clock = clock
                    runner.replace_source(source, config.capture.max_open_attempts)
                runner.apply(config)
                if sinks is not None:
                    self._sinks = sinks
                    runner.set_sinks(list(sinks.values()))
        if config.control != old.control:  # outside the lock: request threads take it
            self._sync_control()
        if removed and runner is not None:
            def close_when_let_go() -> None:
                runner.sinks_taken(2.0)
                for sink in removed:
                    with contextlib.suppress(Exception):
                        sink.close()

            threading.Thread(target=close_when_let_go, name="livefuse-sink-close",
                             daemon=True).start()

    # -- on stream: presets, swap, guard, control API ------------------------------------------
    def _preset_key(self) -> tuple[Any, ...]:
        """What a preset pins: the engine, cache and guard settings and the source face."""
        cfg, image = self._config, self._source_face
        return (cfg.engine, cfg.cache, cfg.guard, None if image is None else str(image.path),
                self._face_index, self.source_face_box)

    @property
    def active_preset(self) -> str | None:
        """The preset last switched to or saved, or ``None``."""
        active = self._active
        return None if active is None else active[0]

    @property
    def preset_modified(self) -> bool:
        """Whether a setting or the source face changed since :attr:`active_preset` was
        switched to or saved (the app marks the preset, a Stream Deck key may too)."""
        active = self._active
        return active is not None and active[1] != self._preset_key()

    @property
    def revision(self) -> int:
        """Grows at every change of settings, source face, preset (saved, renamed, deleted,
        switched) or swap, whoever made it (the app, the control API): a view compares it on
        its timer and reads :attr:`config`, :attr:`active_preset`, :attr:`source_path`,
        :attr:`source_face_box` and :attr:`swap_on` again when it moved."""
        return self._revision

    @property
    def source_face_box(self) -> tuple[float, ...] | None:
        """The chosen face's box in the source photo (x1, y1, x2, y2) when one was given (the
        app's picker, a preset), else ``None``."""
        face = self._face
        return None if face is None else tuple(round(float(v), 1) for v in face.bbox)

    @property
    def source_face_index(self) -> int | None:
        """The chosen face's index (left to right) when one was given, else ``None``."""
        return self._face_index

    @property
    def source_path(self) -> Path | None:
        """The source face photo in use, or ``None``."""
        image = self._source_face
        return None if image is None else Path(image.path)

    def _engine_when_stopped(self, config: AppConfig) -> tuple[EngineLike, bool]:
        """The prepared engine made ready for ``config`` (built when there is none or the
        models change): ``(engine, built)``. A failure leaves the session as it was."""
        engine = self._engine
        if engine is not None:
            if config.cache != self._config.cache:
                engine.set_cache(config.cache)
            if engine.apply(config.effective_engine()):
                return engine, False
        return self._engine_factory(for_engine(config)), True

    def _switch(self, config: AppConfig | None, image: LoadedImage, face_index: int | None,
                face: Face | None, timeout: float) -> Face:
        """Take a new source face (and settings) all or nothing: on any error the session
        keeps what it had. See :meth:`switch_preset`."""
        if config is not None:
            # a new user's trial: the control API's switch to a preset that swaps the person in
            # a reference photo, with none given, answered 200 and froze the stream
            self._check_reference(config)
        with self._switch_lock:
            with self._lock:
                runner = self._runner
                old = self._config
            target = config if config is not None else old
            if runner is not None:
                future = runner.switch(config, image, face_index, face)
                try:
                    chosen = future.result(timeout)
                except FutureTimeout:
                    raise LivefuseError(
                        f"the switch was not taken within {timeout:.0f} s (the engine is busy "
                        "loading models?); it happens when the engine is ready") from None
            else:
                engine, built = self._engine_when_stopped(target)
                try:
                    chosen = engine.use_source(
                        engine.prepare_source(image, face_index, face))
                except Exception:
                    if not built:  # settings applied in place: put the old ones back
                        engine.set_cache(old.cache)
                        engine.apply(old.effective_engine())
                    raise
                self._engine = engine
            with self._lock:
                self._config = target
                self._source_face, self._face_index, self._face = image, face_index, face
                self._revision += 1
        return chosen

    def _photo(self, path: str) -> LoadedImage:
        """A preset's photo, decoded once while the file stays the same (path, size,
        modification time): a switch to a preloaded preset reads no image.

        Raises:
            ImageLoadError: the photo is missing or unreadable.
        """
        try:
            st = Path(path).stat()
        except OSError:
            return load_image(path)  # raises the clear "file not found"
        key = (path, st.st_size, st.st_mtime_ns)
        with self._lock:
            image = self._photos.get(key)
        if image is None:
            image = load_image(path)
            with self._lock:
                while len(self._photos) >= _PHOTOS_KEPT:
                    del self._photos[next(iter(self._photos))]
                self._photos[key] = image
        return image

    def switch_preset(self, name: str, timeout: float = SWITCH_TIMEOUT_S) -> Preset:
        """Switch to a saved preset: its source face and its engine, cache and guard settings.

        Running, the switch happens at a frame boundary, all or nothing: the source face is
        prepared first (a photo prepared before, e.g. by :meth:`preload_presets`, costs no
        detection), then the next frame is swapped with the new face and settings; the camera
        and the virtual camera stay open. When the models stay the same the switch takes at
        most one frame; a change of models rebuilds the engine at once. Stopped, the session's
        engine is made ready (built if needed) and checked the same way.

        Any thread (one switch at a time); returns when the switch was taken.

        Raises:
            PresetNotFoundError: no such preset.
            PresetError: the preset's file is bad, its photo is gone or unreadable, or it shows
                no usable face; the session keeps its current preset.
            LivefuseError: the switch was not taken within ``timeout`` s.
        """
        preset = self.presets.load(name)
        keeps = self.active_preset
        if keeps is not None and keeps.lower() == preset.name.lower():
            keeps = None  # "keeps preset 'Temp'" of Temp itself, refused: its face stays
        # nothing to keep before a first face (`live --preset P` with P's photo gone)
        tail = f"; the stream keeps preset '{keeps}'" if keeps else \
            "; the stream keeps its source face" if self._source_face is not None else ""
        try:
            image = self._photo(preset.source.path)
            self._switch(preset.applied_to(self._config), image, preset.source.face_index,
                         preset.source.face(), timeout)
        except PresetError:
            raise
        except LivefuseError as exc:
            raise PresetError(preset.name, f"refused: {exc}{tail}") from None
        with self._lock:
            self._active = (preset.name, self._preset_key())
            self._revision += 1
        self._status(f"preset: {preset.name}")
        return preset

    def set_source_checked(self, image: LoadedImage, face_index: int | None = None,
                           face: Face | None = None, timeout: float = SWITCH_TIMEOUT_S) -> Face:
        """Like :meth:`set_source_face`, but all or nothing and synchronous: the face is found
        first, and a photo without a usable face raises while the stream keeps its face
        (the control API's ``POST /source``).

        Raises:
            NoFaceError / FaceIndexError / FaceTooSmallError: no usable face; nothing changed.
        """
        return self._switch(None, image, face_index, face, timeout)

    def set_source_path(self, path: str | Path, face_index: int | None = None,
                        timeout: float = SWITCH_TIMEOUT_S) -> Face:
        """Use the photo at ``path`` as the source (the control API's ``POST /source``), all or
        nothing (:meth:`set_source_checked`).

        Raises:
            ImageLoadError: the photo is missing or unreadable.
            NoFaceError / FaceIndexError / FaceTooSmallError: no usable face.
            In every case the stream keeps its source face.
        """
        return self.set_source_checked(load_image(Path(path).expanduser()), face_index,
                                       timeout=timeout)

    def preload_presets(self, timeout: float = SWITCH_TIMEOUT_S) -> dict[str, str | None]:
        """Prepare every preset's source face that the current engine can take (same models),
        so that switching to it costs no detection. Stopped (after :meth:`prepare`), it runs
        here; running, one preset per frame boundary (each such frame waits for its
        detection: call it before :meth:`start` where you can).

        Returns:
            Per preset, ``None`` when ready, else why not (photo gone, no face, other models).
        """
        out: dict[str, str | None] = {}
        for item in self.presets.list():
            if isinstance(item, PresetError):
                out[item.name] = item.problem
                continue
            if not _same_models(item.engine, self._config.engine):
                out[item.name] = "other models: prepared when switched to"
                continue
            if item.engine.face_selector == "reference" and self._reference is None:
                # an option trial: "ready" was said of a preset that every switch refused
                out[item.name] = ("swaps the person in a reference photo, and none is given "
                                  "(--reference PHOTO, or the app's reference photo)")
                continue
            try:
                image = self._photo(item.source.path)
                runner, engine = self._runner, self._engine
                if runner is not None:
                    runner.preload(image, item.source.face_index,
                                   item.source.face()).result(timeout)
                elif engine is not None:
                    engine.prepare_source(image, item.source.face_index, item.source.face())
                else:
                    out[item.name] = "no engine yet (call prepare first)"
                    continue
                out[item.name] = None
            except (LivefuseError, FutureTimeout) as exc:
                out[item.name] = str(exc) or "timed out"
        return out

    def save_preset(self, name: str, overwrite: bool = True) -> Preset:
        """Save the current source face and engine, cache and guard settings as a preset,
        which becomes the active one.

        Raises:
            PresetError: no source face yet, an invalid name, the name is taken (with
                ``overwrite`` off).
        """
        image = self._source_face
        if image is None:
            raise PresetError(name, "choose a source face photo first")
        source = PresetSource(path=str(image.path), face_index=self._face_index,
                              face_box=self.source_face_box or ())
        preset = Preset.of(name, self._config, source)
        path = self.presets.save(preset, overwrite=overwrite)
        preset = dataclasses.replace(preset, name=path.stem)
        with self._lock:
            self._active = (preset.name, self._preset_key())
            self._revision += 1
        return preset

    def rename_preset(self, old: str, new: str) -> str:
        """Rename a preset (see :meth:`PresetStore.rename`); the active one follows."""
        name = self.presets.rename(old, new)
        with self._lock:
            if self._active is not None and self._active[0].casefold() == old.casefold():
                self._active = (name, self._active[1])
            self._revision += 1
        return name

    def delete_preset(self, name: str) -> None:
        """Delete a preset (see :meth:`PresetStore.delete`); the stream keeps running as it
        is."""
        self.presets.delete(name)
        with self._lock:
            if self._active is not None and self._active[0].casefold() == name.casefold():
                self._active = None
            self._revision += 1

    @property
    def swap_on(self) -> bool:
        return self._swap

    def set_swap(self, on: bool) -> None:
        """Swap faces (``True``) or pass frames as they are (``False``; with the privacy guard
        on, every face is then hidden). Taken at the next frame."""
        self._swap = bool(on)
        with self._lock:
            self._revision += 1
        runner = self._runner
        if runner is not None:
            runner.swap = self._swap

    def set_guard(self, mode: GuardMode, hold_frames: int | None = None) -> None:
        """Set the privacy guard (``off``, ``blur``, ``hold``), from the next frame on.

        Raises:
            ConfigError: an unknown mode or ``hold_frames`` out of range.
        """
        guard = dataclasses.replace(self._config.guard, mode=mode)
        if hold_frames is not None:
            guard = dataclasses.replace(guard, hold_frames=hold_frames)
        self.apply(dataclasses.replace(self._config, guard=guard.validate()))

    def status(self) -> dict[str, Any]:
        """The session's state as JSON-ready values (``GET /status``): frame rates, latency,
        drops, the preset, engine, precision, swap and privacy guard."""
        snap = self.metrics.snapshot()
        cfg = self._config
        runner = self._runner
        guard = runner.guard.state if runner is not None else None

        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 2)

        return {
            "running": self.running,
            "fps": {"input": r(snap.input_fps), "processed": r(snap.processed_fps),
                    "output": r(snap.output_fps)},
            "latency_ms": {"p50": r(snap.latency_p50_ms), "p95": r(snap.latency_p95_ms)},
            "frames": {"in": snap.frames_in, "processed": snap.frames_processed,
                       "out": snap.frames_out},
            "dropped": dict(snap.dropped), "dropped_total": sum(snap.dropped.values()),
            "preset": self.active_preset, "preset_modified": self.preset_modified,
            "source": None if self.source_path is None else str(self.source_path),
            "swap": self._swap,
            # the engine that runs, not "auto" (a new user's trial); and what was asked
            "engine": self.engine_in_use, "engine_asked": cfg.engine.engine,
            "precision": self.precision_in_use,
            "detect_every": cfg.effective_engine().detect_every,
            "guard": {"mode": cfg.guard.mode, "hold_frames": cfg.guard.hold_frames,
                      "active": guard is not None and guard.active,
                      "action": "none" if guard is None else guard.action,
                      "regions": 0 if guard is None else guard.regions,
                      "lost": 0 if guard is None else guard.lost,
                      "frames_blurred": snap.guard.frames_blurred,
                      "frames_held": snap.guard.frames_held,
                      "line": f"guard {cfg.guard.mode}" if guard is None else guard.line()},
            "cache": {"enabled": cfg.cache.enabled, "hits": snap.cache_hits,
                      "misses": snap.cache_misses},
            "precision_fallbacks": snap.precision_fallbacks,
            "vram_mib": r(snap.vram_process_mib),
            "statuses": self.statuses[-5:],
        }

    def presets_info(self) -> dict[str, Any]:
        """The presets as JSON-ready values (``GET /presets``): name, photo, engine, guard, and
        for a preset that cannot be read, its error."""
        items: list[dict[str, Any]] = []
        for item in self.presets.list():
            if isinstance(item, PresetError):
                items.append({"name": item.name, "error": item.problem})
            else:
                items.append({"name": item.name, "source": item.source.path,
                              "engine": item.engine.engine,
                              "face_selector": item.engine.face_selector,
                              "guard": item.guard.mode, "cache": item.cache.enabled,
                              "enhancer": item.engine.enhancer})
        return {"presets": items, "active": self.active_preset,
                "modified": self.preset_modified}

    @property
    def control(self) -> ControlServer | None:
        """The control API server while it serves, else ``None``."""
        return self._control

    def open_control(self, token: str | None = None) -> ControlServer:
        """Serve the local control API as ``config.control`` says (address, port), until
        :meth:`close_control` (:meth:`stop` leaves it serving: a Stream Deck may start a
        stopped stream's preset). Idempotent.

        Args:
            token: the bearer token; by default the one stored 0600 in ``token_file`` (made
                on first use, :func:`livefuse.control.load_or_create_token`).

        Raises:
            LivefuseError: the port is taken or the address cannot be bound.
        """
        from livefuse.control import ControlServer, TokenFile, token_path

        if self._control is not None:
            return self._control
        cfg = self._config.control
        server = ControlServer(self, token or TokenFile(self._token_file or token_path()),
                               cfg.host, cfg.port, on_status=self._status)
        self._control = server
        return server

    def _sync_control(self) -> None:
        """``config.control`` changed (:meth:`apply`): serve it anew, or stop serving it."""
        self.close_control()
        if self._config.control.enabled:
            try:
                self.open_control()
            except LivefuseError as exc:
                self._status(f"control API off: {exc}")

    def close_control(self) -> None:
        """Stop serving the control API (requests in flight finish)."""
        server, self._control = self._control, None
        if server is not None:
            server.close()



def _same_models(a: EngineConfig, b: EngineConfig) -> bool:
    """Whether engines of ``a`` and ``b`` load the same models: equal in every field of
    :data:`~livefuse.config.MODEL_RELOAD_FIELDS`, with an ``auto`` engine taken as the engine it
    resolves to (a preset saved with the defaults says ``auto``; a session started with ``-s``
    runs the engine ``auto`` chose)."""
    from livefuse.config import MODEL_RELOAD_FIELDS

    if any(getattr(a, f) != getattr(b, f) for f in MODEL_RELOAD_FIELDS - {"engine"}):
        return False
    if a.engine == b.engine:
        return True
    return resolve_engine(a).engine == resolve_engine(b).engine

__all__ = ["SWITCH_TIMEOUT_S", "Session", "build_source"]
