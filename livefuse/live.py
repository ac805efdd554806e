"""LiveRunner: capture thread -> LatestSlot -> inference thread -> sinks (design.md section 3).

The capture thread only reads frames, stamps them (``time.perf_counter_ns``) and, on the GPU
path, stages them on the device (the upload of frame n+1 overlaps the GPU work on frame n); the
inference thread runs the Engine and hands each packet to every sink. Between them sits one slot:
when the engine is slower than the camera, older frames are dropped (and counted), so latency
stays bounded by about one capture period plus one processing time.

Everything that changes while running (settings, the source face, the set of sinks) is handed
over through :meth:`LiveRunner.apply` / :meth:`LiveRunner.switch` / :meth:`LiveRunner.set_sinks`
and taken by the inference thread at the next frame boundary; nothing else touches the engine or
the sink list. Between the engine and the sinks the privacy guard (:mod:`livefuse.guard`) hides
every face that is not swapped.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from livefuse.config import AppConfig, CacheConfig, EngineConfig
from livefuse.errors import LivefuseError
from livefuse.gil import hold_switch_interval
from livefuse.guard import PrivacyGuard
from livefuse.imaging import LoadedImage
from livefuse.io.sinks import Sink
from livefuse.io.sources import Capture, Source, VideoFileSource
from livefuse.metrics import Metrics
from livefuse.slot import LatestSlot, SlotClosed
from livefuse.types import Face, Frame, FramePacket, StagedFrame

if TYPE_CHECKING:
    from livefuse.engine import PreparedSource
    from livefuse.models.engine_choice import EngineChoice

_POLL_S = 0.25  # how often the inference thread wakes without frames (watchdog, stop)
REBUILD_DELAY_S = 0.3
UNSWAPPED_FRAMES = 30
"""Frames in a row with faces in view and none swapped before the stream says why, once: about
a second at 30 fps, so a face turning away for a moment says nothing."""
LIVE_SWITCH_INTERVAL_S = 0.0005
"""Python's GIL switch interval while a session runs (the default is 5 ms). The capture and
inference threads hand the GIL over at every wait for the device; with the default, a thread
that wakes from one may wait up to 5 ms for the other to yield. Measured on the H200 at 1080p/60
(docs/BENCHMARKS.md §12.2): with 4 faces p50 16.2 → 14.6 ms, max 29 → 22 ms."""
"""An engine change that needs the models loaded again is taken once the settings have stayed
the same this long, so dragging a spin box does not reload the models at every step."""


class EngineLike(Protocol):
    """What the runner needs from an engine (:class:`livefuse.engine.Engine` has it)."""

    def set_source(self, image: LoadedImage, face_index: int | None = None,
                   face: Face | None = None) -> Face: ...
    def set_reference(self, image: LoadedImage) -> None: ...
    def prepare_source(self, image: LoadedImage, face_index: int | None = None,
                       face: Face | None = None) -> PreparedSource: ...
    def use_source(self, prepared: PreparedSource) -> Face: ...
    def lend(self, shape: tuple[int, ...]) -> Frame | None: ...
    def stage(self, frame: Frame) -> StagedFrame: ...
    def process(self, frame: Frame | StagedFrame, index: int = 0,
                t_capture_ns: int | None = None, strict: bool = False,
                in_place: bool = False) -> FramePacket: ...
    def apply(self, config: EngineConfig) -> bool: ...
    def set_cache(self, config: CacheConfig) -> None: ...
    @property
    def source_notes(self) -> tuple[str, ...]: ...
    @property
    def reference_notes(self) -> tuple[str, ...]: ...
    @property
    def precision_in_use(self) -> str: ...
    @property
    def engine_choice(self) -> EngineChoice: ...
    @property
    def cache(self) -> Any: ...


EngineFactory = Callable[[AppConfig], EngineLike]


def default_engine_factory(config: AppConfig) -> EngineLike:
    """The project's Engine for ``config`` (the runner hands factories a config whose engine
    settings are :meth:`AppConfig.effective_engine`)."""
    from livefuse.engine import Engine

    # a live stream must not stall when a face appears: its graphs are captured up front
    return Engine(config.engine, cache=config.cache, warm_up=True)


def for_engine(config: AppConfig) -> AppConfig:
    """``config`` as an engine factory should build it (the guard's detection interval)."""
    return dataclasses.replace(config, engine=config.effective_engine())


class SwitchCancelled(LivefuseError):
    """A checked switch (:meth:`LiveRunner.switch`) was not taken: a newer one replaced it, or
    the session stopped first."""


@dataclass
class _Switch:
    config: AppConfig | None
    image: LoadedImage
    face_index: int | None
    face: Face | None
    future: Future[Face]
    commit: bool = True


@dataclass
class _Pending:
    config: AppConfig | None = None
    config_at: float = 0.0
    source_face: LoadedImage | None = None
    face: Face | None = None
    face_index: int | None = None
    reference: LoadedImage | None = None
    sinks: list[Sink] | None = None


def _release(item: tuple[StagedFrame, int]) -> None:
    if item[0].release is not None:
        item[0].release()


class LiveRunner:
    """Runs a live session; ``start``, ``stop``, ``apply`` and ``set_sinks`` are safe from any
    thread.

    Args:
        engine: an engine instance; or ``None`` and a ``factory``.
        source: where frames come from; opened on the capture thread.
        sinks: receive every processed frame (``send(frame, t_capture_ns)``).
        config: the starting settings.
        source_face: the source face photo; set on the engine before the first frame.
        face_index, face: which face of that photo (see :meth:`livefuse.engine.Engine.set_source`).
        reference: a photo of the person to swap for ``face_selector='reference'``; set on the
            engine before the first frame and again after every rebuild.
        on_status: status lines (``camera lost: ...``, ``virtual camera missing: ...``,
            ``engine error: ...``); called from the runner's threads.
        metrics: where measurements go; a new :class:`Metrics` by default.
        factory: builds the engine from the settings (``AppConfig -> engine``) on the inference
            thread, at start and again when a setting needs the models loaded again.
        max_open_attempts: the capture gives up after this many failed opens (``None``: never).
        after: a runner whose stop timed out while its inference thread was still busy (loading
            an engine): this runner's inference thread waits for that one to end, then takes its
            engine when it has none, so two inference threads never run and two engines never
            load at once.

    Raises:
        ValueError: neither an engine nor a factory.
    """

    def __init__(self, engine: EngineLike | None, source: Source,
                 sinks: Sequence[Sink] = (), config: AppConfig | None = None,
                 source_face: LoadedImage | None = None, face_index: int | None = None,
                 on_status: Callable[[str], None] | None = None,
                 metrics: Metrics | None = None, face: Face | None = None,
                 factory: EngineFactory | None = None,
                 max_open_attempts: int | None = None,
                 reference: LoadedImage | None = None,
                 after: LiveRunner | None = None) -> None:
        if engine is None and factory is None:
            raise ValueError("LiveRunner needs an engine or an engine factory")
        self.config = (config or AppConfig()).validate()
        self._factory = factory
        self._engine: EngineLike | None = engine
        self.source = source
        self.metrics = metrics or Metrics()
        self._watched: set[int] = set()
        self._sinks = list(sinks)
        self._watch(self._sinks)
        self._on_status = on_status or (lambda s: None)
        self._source_face = source_face
        self._face_index = face_index
        self._face = face
        self._reference = reference
        self.max_open_attempts = max_open_attempts
        self._after = after
        self._pending = _Pending(source_face=source_face, face_index=face_index, face=face,
                                 reference=reference)
        self._lock = threading.Lock()  # guards _pending, start/stop
        self._slot: LatestSlot[tuple[StagedFrame, int]] | None = None
        self._capture: Capture | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._stage: Callable[[Frame], StagedFrame] | None = None
        self._index = 0
        self._status_lock = threading.Lock()
        self._statuses: deque[str] = deque(maxlen=100)
        self._switch: _Switch | None = None
        self._preloads: deque[_Switch] = deque()
        self._release_switch: Callable[[], None] | None = None  # gives the GIL interval back
        self.guard = PrivacyGuard(self.config.guard)
        self.swap = True
        """Swap faces (``False``: frames pass as they are, but the guard still hides them)."""
        self._swapping = True  # what the inference thread last acted on
        self._fallbacks_seen: set[int] = set()
        self._unswapped_run = 0  # frames in a row with faces in view and none swapped
        self._pass: tuple[int, int] = (0, 0)  # (id of the source, pass over its file)
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
    def sinks(self) -> list[Sink]:
        """The sinks frames currently go to (a copy; change them with :meth:`set_sinks`)."""
        return list(self._sinks)

    @property
    def source_ended(self) -> bool:
        return self._capture is not None and self._capture.ended

    @property
    def source_incomplete(self) -> str | None:
        """Why a video file input ended before its end (``video 'x.mp4': input ended early:
        37 of 90 frames``), or ``None``."""
        return None if self._capture is None else self._capture.incomplete

    @property
    def capture_failed(self) -> str | None:
        """Why the capture gave up (``max_open_attempts`` failed opens in a row), or ``None``."""
        capture = self._capture
        if capture is None or capture.error is None:
            return None
        return str(capture.error)

    @property
    def statuses(self) -> list[str]:
        """The last 100 status lines, oldest first (a copy)."""
        with self._status_lock:
            return list(self._statuses)

    def status(self, line: str) -> None:
        with self._status_lock:
            self._statuses.append(line)
        with contextlib.suppress(Exception):  # a broken UI callback must not stop frames
            self._on_status(line)

    def start(self) -> None:
        """Start capture and inference (no effect when running). Returns at once.

        After a :meth:`stop` that timed out (the inference thread still inside a model load),
        the new inference thread first waits for the old one to end: one at a time, always."""
        with self._lock:
            if self.running and not self._stop.is_set():
                return
            previous = self._thread if self.running else None
            stop = self._stop = threading.Event()  # each run has its own: the old one stays set
            slot: LatestSlot[tuple[StagedFrame, int]] = LatestSlot(on_drop=_release)
            self._slot = slot
            self._capture = self._new_capture(self.source, self.max_open_attempts)
            waits = previous is not None or (self._after is not None and self._after.running)
            # a thread that waits for the old one is not an inference thread yet: named so
            self._thread = threading.Thread(
                target=self._run, args=(slot, stop, previous), daemon=True,
                name="livefuse-inference-next" if waits else "livefuse-inference")
            if self._release_switch is None:
                self._release_switch = hold_switch_interval(LIVE_SWITCH_INTERVAL_S)
            self._capture.start()
            self._thread.start()

    def _on_frame(self, frame: Frame, t_ns: int) -> None:
        """The capture thread's callback: stamp, stage (GPU path), hand over."""
        slot = self._slot
        if slot is None:
            return
        self.metrics.frame_in(t_ns)
        stage = self._stage
        slot.put((stage(frame) if stage is not None else StagedFrame(host=frame), t_ns))

    def _lend(self, shape: tuple[int, ...]) -> Frame | None:
        """The capture thread's buffer for its next frame: the engine's pinned memory on the
        GPU path (its stage then skips a copy of the frame), none while it is rebuilt."""
        engine = self._engine
        if engine is None or self._stage is None:
            return None
        return engine.lend(shape)

    def _new_capture(self, source: Source, max_open_attempts: int | None) -> Capture:
        return Capture(source, self._on_frame, self.status, max_open_attempts=max_open_attempts,
                       buffers=self._lend)

    def replace_source(self, source: Source, max_open_attempts: int | None = None,
                       timeout: float = 1.0) -> None:
        """Switch to another frame source while the engine keeps running: the old capture
        thread is stopped (up to ``timeout`` s; a camera must be released before it can be
        opened again), then the new one started."""
        with self._lock:
            old = self._capture
            self.source, self.max_open_attempts = source, max_open_attempts
        if old is not None:
            old.stop(timeout)  # outside the lock: the inference thread keeps taking frames
        with self._lock:
            if old is None or self._stop.is_set() or self._capture is not old:
                return
            self._capture = self._new_capture(source, max_open_attempts)
            self._capture.start()

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
            t, capture = self._thread, self._capture
            left = [*([self._switch] if self._switch is not None else []), *self._preloads]
            self._switch = None
            self._preloads.clear()
            if self._release_switch is not None:
                self._release_switch()
                self._release_switch = None
        for switch in left:
            switch.future.set_exception(SwitchCancelled("the session stopped before the switch"))
        # joined outside the lock: the inference thread takes it at every frame boundary
        if t is not None:
            t.join(max(0.0, deadline - time.monotonic()))
        cap_ok = True
        if capture is not None:
            cap_ok = capture.stop(max(0.0, deadline - time.monotonic()))
        return cap_ok and (t is None or not t.is_alive())

    def apply(self, config: AppConfig | None = None, source_face: LoadedImage | None = None,
              face_index: int | None = None, face: Face | None = None,
              reference: LoadedImage | None = None) -> None:
        """Hand over new settings and/or a new source face (and which of its faces: an index
        left to right, or the face itself) and/or a new reference photo; taken at the next
        frame boundary.

        Raises:
            ConfigError: ``config`` is invalid (checked here, on the caller's thread).
        """
        if config is not None:
            config.validate()
        with self._lock:
            if config is not None:
                self._pending.config = config
                self._pending.config_at = time.monotonic()
            if source_face is not None:
                self._pending.source_face = source_face
                self._pending.face_index = face_index
                self._pending.face = face
            if reference is not None:
                self._pending.reference = reference

    @property
    def switch_pending(self) -> bool:
        """Whether a :meth:`switch` waits for the next frame boundary."""
        with self._lock:
            return self._switch is not None

    def switch(self, config: AppConfig | None, source_face: LoadedImage,
               face_index: int | None = None, face: Face | None = None) -> Future[Face]:
        """Switch to new settings and a new source face at the next frame boundary, all or
        nothing: the inference thread first prepares the source face with the running engine
        (a photo without a face changes nothing), then takes both before the next frame, so no
        frame mixes the old and the new (a prepared photo is memoised by the engine: switching
        back costs no detection). When the new settings need other models, the face is
        checked with the running engine, then the old models are freed, the new ones loaded
        and the face prepared on them; if that fails, the old ones are loaded again (the
        stream waits meanwhile, and keeps what it had).

        Call it while the runner runs (the inference thread resolves the future).

        Returns:
            A future: the chosen source face, or the error (``NoFaceError``,
            ``FaceIndexError``, :class:`SwitchCancelled`, ...), in which case nothing changed.

        Raises:
            ConfigError: ``config`` is invalid (checked here).
        """
        if config is not None:
            config.validate()
        future: Future[Face] = Future()
        with self._lock:
            old, self._switch = self._switch, _Switch(config, source_face, face_index, face,
                                                      future)
        if old is not None:
            old.future.set_exception(SwitchCancelled("replaced by a newer switch"))
        return future

    def preload(self, source_face: LoadedImage, face_index: int | None = None,
                face: Face | None = None) -> Future[Face]:
        """Prepare a source face with the running engine, one per frame boundary (that frame
        waits for it), so a later :meth:`switch` to it is taken without a detection. Nothing
        else changes. Call it while the runner runs.

        Returns:
            A future: the face that would be used, or the error.
        """
        future: Future[Face] = Future()
        with self._lock:
            self._preloads.append(_Switch(None, source_face, face_index, face, future, False))
        return future

    def set_sinks(self, sinks: Sequence[Sink]) -> None:
        """Send frames to ``sinks`` from the next frame boundary on. Sinks left out are not
        closed here: the caller owns them (it may close them after this call returns: the
        inference thread never sends to a sink it has let go of, see :meth:`sinks_taken`)."""
        with self._lock:
            self._pending.sinks = list(sinks)
        if not self.running:
            self._take_sinks()

    def sinks_taken(self, timeout: float = 1.0) -> bool:
        """Wait until a :meth:`set_sinks` call has been taken by the inference thread."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                if self._pending.sinks is None:
                    return True
            if not self.running:
                self._take_sinks()
            time.sleep(0.005)
        return False

    # -- the inference thread -------------------------------------------------------------------
    def _take_sinks(self) -> None:
        with self._lock:
            sinks, self._pending.sinks = self._pending.sinks, None
        if sinks is not None:
            self._watch(sinks)
            self._sinks = sinks

    def _watch(self, sinks: Sequence[Sink]) -> None:
        # a sink that reports its real send time (the virtual camera) ends the latency there
        for sink in sinks:
            if id(sink) not in self._watched:
                self._watched.add(id(sink))
                sink.watch_sent(self.metrics.frame_out)

    def _take_pending(self) -> None:
        self._take_sinks()
        with self._lock:
            pending = self._pending
            cfg = pending.config
            wait = cfg is not None and self._engine is not None and \
                self._needs_rebuild(cfg) and \
                time.monotonic() - pending.config_at < REBUILD_DELAY_S
            keep_cfg = cfg if wait else None
            self._pending = _Pending(config=keep_cfg, config_at=pending.config_at)
            if wait:
                cfg = None
        image, reference = pending.source_face, pending.reference
        if image is not None:
            self._source_face, self._face_index, self._face = image, pending.face_index, \
                pending.face
        if reference is not None:
            self._reference = reference
        rebuild = self._engine is None
        if cfg is not None:
            rebuild = not self._take_config(cfg) or rebuild
        if rebuild and self._factory is not None:
            self._stage = None
            self._engine = None  # the old engine's models are freed before the new load
            self._engine = self._factory(for_engine(self.config))
            self._stage = self._engine.stage
            image, reference = self._source_face, self._reference
        elif rebuild and cfg is not None and self._engine is not None:
            self.status("engine settings ignored: this runner was given a fixed engine")
        if self._engine is not None and self._stage is None:
            self._stage = self._engine.stage
        if reference is not None and self._engine is not None:
            self._engine.set_reference(reference)
        if image is not None and self._engine is not None:
            self._engine.set_source(image, self._face_index, self._face)
        self._take_switch()

    def _take_config(self, cfg: AppConfig) -> bool:
        """Make ``cfg`` the runner's settings; ``False`` when the engine must be rebuilt."""
        old, self.config = self.config, cfg
        if cfg.guard != old.guard:
            self.guard.configure(cfg.guard)
        engine = self._engine
        if engine is None:
            return True
        if cfg.cache != old.cache:
            engine.set_cache(cfg.cache)
        new, before = cfg.effective_engine(), old.effective_engine()
        return new == before or engine.apply(new)

    def _take_switch(self) -> None:
        """A checked :meth:`switch`, on the inference thread at a frame boundary."""
        with self._lock:
            switch, self._switch = self._switch, None
            if switch is None and self._preloads:
                switch = self._preloads.popleft()
        if switch is None:
            return
        engine = self._engine
        if engine is None:
            switch.future.set_exception(LivefuseError(
                "the engine is not ready (see the engine error in the status lines)"))
            return
        try:
            prepared = engine.prepare_source(switch.image, switch.face_index, switch.face)
        except Exception as exc:  # the caller is told; the stream keeps what it had
            switch.future.set_exception(exc)
            return
        if not switch.commit:
            switch.future.set_result(prepared.face)
            return
        cfg = switch.config
        if cfg is not None and self._needs_rebuild(cfg):
            built = self._engine_for_switch(switch, cfg)
            if built is None:
                return
            engine, prepared = built
        if cfg is not None:
            self._take_config(cfg)
        engine.use_source(prepared)
        self._source_face, self._face_index, self._face = switch.image, switch.face_index, \
            switch.face
        switch.future.set_result(prepared.face)

    def _engine_for_switch(self, switch: _Switch, cfg: AppConfig
                           ) -> tuple[EngineLike, PreparedSource] | None:
        """A switch to other models: the engine built for ``cfg`` and the new face prepared on
        it; on any failure the engine of the settings before is built again with its face
        (the stream keeps what it had), the switch fails, and ``None`` is returned."""
        if self._factory is None:
            switch.future.set_exception(LivefuseError(
                "these settings need other models, and this session's engine is fixed"))
            return None
        self._stage = None
        self._engine = None  # the old engine's models are freed before the new load
        try:
            engine = self._factory(for_engine(cfg))
            if self._reference is not None:
                engine.set_reference(self._reference)
            prepared = engine.prepare_source(switch.image, switch.face_index, switch.face)
        except Exception as exc:
            self.status(f"switch refused, the models before are loaded again: {exc}")
            self._engine = self._factory(for_engine(self.config))
            self._stage = self._engine.stage
            if self._reference is not None:
                self._engine.set_reference(self._reference)
            if self._source_face is not None:
                self._engine.set_source(self._source_face, self._face_index, self._face)
            switch.future.set_exception(exc)
            return None
        self._engine, self._stage = engine, engine.stage
        return engine, prepared

    def _process(self, engine: EngineLike, staged: StagedFrame, t_cap: int) -> FramePacket:
        """One frame through the engine; with the swap off, the frame as it is, its faces
        (found by the engine when the guard needs them) all counted as unswapped."""
        swap = self.swap  # read once: another thread sets it
        if swap != self._swapping:
            self._swapping = swap
            if not swap:
                self.guard.swap_off()
        if swap:
            return engine.process(staged, self._index, t_cap, in_place=True)
        if not self.guard.on:
            _release((staged, t_cap))
            return FramePacket(index=self._index, t_capture_ns=t_cap, frame=staged.host,
                               output=staged.host)
        packet = engine.process(staged, self._index, t_cap)  # the input stays as it is
        packet.unswapped = packet.faces + packet.unswapped
        packet.faces, packet.output, packet.swapped = [], packet.frame, 0
        return packet

    def _forget_at_cut(self, t_cap: int) -> bool:
        """Whether the frame captured at ``t_cap`` begins a new pass over a looped video file,
        or comes from another source: a cut, after which the faces the guard followed are gone,
        and it forgets them (a new user's trial: with a looped clip the guard kept pixelating
        the last pass's face, grown over the swapped face of the new pass, 5 frames in 8). A
        camera has no cut."""
        source = self.source
        if not isinstance(source, VideoFileSource):
            return False
        media = source.media_time(t_cap)
        if media is None:
            return False
        now = (id(source), bisect.bisect_right(source.pass_starts(), media) - 1)
        cut = now[0] != self._pass[0] or now[1] > self._pass[1]
        if cut:  # the first frame counts too: the guard has nothing to forget yet
            self._pass = now
            self.guard.reset()
        return cut

    def _say_unswapped(self, packet: FramePacket) -> None:
        """Say once, after :data:`UNSWAPPED_FRAMES` frames, why faces in view are not swapped (a
        new user's trial: a ``target_face_index`` past the faces in view, or a reference photo
        of someone else, streamed every face as it was with no word)."""
        if not self.swap or packet.swapped or not packet.skipped:
            self._unswapped_run = 0
            return
        self._unswapped_run += 1
        if self._unswapped_run == UNSWAPPED_FRAMES:
            self.status(f"faces in view, none swapped: {packet.skipped[0].reason}")

    def _measure(self, engine: EngineLike) -> None:
        stats = engine.cache.stats
        self.metrics.set_cache(stats.hits, stats.misses, stats.forced_refreshes)
        # an fp16 engine that fell back to fp32 stays there: counted once per engine
        if id(engine) not in self._fallbacks_seen and \
                engine.precision_in_use.endswith("(fallback)"):
            self._fallbacks_seen.add(id(engine))
            self.metrics.add_precision_fallback()

    def _needs_rebuild(self, cfg: AppConfig) -> bool:
        from livefuse.config import MODEL_RELOAD_FIELDS

        return any(getattr(cfg.engine, f) != getattr(self.config.engine, f)
                   for f in MODEL_RELOAD_FIELDS)

    def _wait_for_others(self, previous: threading.Thread | None,
                         stop: threading.Event) -> bool:
        """Wait until the inference threads this one follows have ended (``False``: stopped
        meanwhile), then take the engine the runner this one follows has left, if none was
        given."""
        after = self._after
        for t in (previous, after._thread if after is not None else None):
            while t is not None and t.is_alive():
                if stop.is_set():
                    return False
                t.join(_POLL_S)
        if after is not None:
            self._after = None
            if self._engine is None and after.engine is not None:
                engine = after.engine
                engine.set_cache(self.config.cache)
                if engine.apply(self.config.engine):
                    self._engine = engine  # else rebuilt by _take_pending, the old one let go
        return True

    def _run(self, slot: LatestSlot[tuple[StagedFrame, int]], stop: threading.Event,
             previous: threading.Thread | None) -> None:
        if not self._wait_for_others(previous, stop):
            return
        threading.current_thread().name = "livefuse-inference"
        try:
            self._take_pending()
        except Exception as exc:
            self.errors += 1
            self.status(f"engine error: {exc}")
        while not stop.is_set():
            try:
                item = slot.get(timeout=_POLL_S)
            except SlotClosed:
                return
            capture = self._capture
            if capture is not None:
                capture.watch()
            self.metrics.set_dropped("capture->engine", slot.dropped)
            if item is None:
                with contextlib.suppress(Exception):
                    self._take_pending()  # a debounced rebuild or new sinks with no frames
                continue
            staged, t_cap = item
            try:
                self._take_pending()
                if self._engine is None:
                    _release(item)
                    continue
                packet = self._process(self._engine, staged, t_cap)
            except Exception as exc:  # the frame is not sent: nothing leaves unswapped
                _release(item)
                self.errors += 1
                self.status(f"engine error: {exc}")
                continue
            finally:
                self._index += 1
            self.metrics.frame_processed(packet.timings_ms, t_cap)
            self._measure(self._engine)
            self._say_unswapped(packet)
            self._forget_at_cut(t_cap)
            out = packet.output if packet.output is not None else staged.host
            t_guard = time.perf_counter_ns()
            # every frame is a new array, never written to once handed to the sinks: the
            # guard's hold keeps a reference to the last fully swapped one, not a copy
            out = self.guard.apply(out, [f for f in packet.faces if not any(
                f is u for u in packet.unswapped)], packet.unswapped)
            self.metrics.set_guard(self.guard.state, (time.perf_counter_ns() - t_guard) / 1e6
                                   if self.guard.on else None)
            timed = False
            for sink in self._sinks:
                if stop.is_set():
                    return
                try:
                    sink.send(out, t_cap)
                except Exception as exc:
                    self.errors += 1
                    self.status(f"sink {sink.name} failed: {exc}")
                timed = timed or sink.reports_sent
                self.metrics.set_dropped(f"->{sink.name}", sink.dropped)
                if sink.unsent:
                    self.metrics.set_unsent(sink.name, sink.unsent)
            self.frames_out += 1
            if not timed:  # else the sink reports the real send time (Metrics.frame_out)
                self.metrics.frame_out(t_cap)


__all__ = ["REBUILD_DELAY_S", "UNSWAPPED_FRAMES", "EngineFactory", "EngineLike", "LiveRunner",
           "SwitchCancelled", "default_engine_factory", "for_engine"]
