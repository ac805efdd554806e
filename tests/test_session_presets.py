"""Switching presets in a running session: at a frame boundary, in one frame, without a black
or unswapped frame, the camera untouched; a preset that cannot be used is refused and the
stream keeps the preset it had."""

from __future__ import annotations

import dataclasses
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lockstep import LockstepSource
from stub_engine import wait_for

from livefuse.config import AppConfig, CaptureConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import load_image, save_image
from livefuse.io.sources import FramesSource, Source
from livefuse.presets import Preset, PresetError, PresetNotFoundError, PresetSource, PresetStore
from livefuse.samples import insightface_image
from livefuse.session import Session
from livefuse.testing.guard_clip import GuardClip, guard_clip, unaltered_faces
from livefuse.types import Frame

ENGINE = EngineConfig(face_selector="one", detect_every=3, rotation="off")


@pytest.fixture(scope="module")
def clip() -> GuardClip:
    full = guard_clip(load_image(insightface_image("t1.jpg")).bgr, frames=24)
    return full  # one face, moving, always detected


@pytest.fixture()
def store(tmp_path: Path, astronaut_path: Path, hanks_path: Path) -> PresetStore:
    store = PresetStore(tmp_path / "presets")
    photos = tmp_path / "photos"
    photos.mkdir()
    for name, src in (("Astro", astronaut_path), ("Hanks", hanks_path),
                      ("Gone", astronaut_path)):
        dst = photos / f"{name}{src.suffix}"
        shutil.copy(src, dst)
        store.save(Preset.of(name, AppConfig(engine=ENGINE), PresetSource(path=str(dst))))
    (photos / f"Gone{astronaut_path.suffix}").unlink()  # its photo was deleted since
    wall = save_image(photos / "wall.png", np.full((240, 240, 3), 120, np.uint8))
    # written by hand: `presets save` would refuse a photo without a face
    (store.folder / "Wall.toml").write_text(f'[source]\npath = "{wall}"\n', encoding="utf-8")
    store.save(Preset.of("Neural", AppConfig(engine=EngineConfig(engine="neural")),
                         PresetSource(path=str(photos / f"Hanks{hanks_path.suffix}"))))
    return store


class _Counting:
    """The shared analyser, counting detections on photos (not on the clip's frames)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.photo_detections = inner, 0

    def detect(self, frame: Any, upsample: int | None = None) -> Any:
        host = getattr(frame, "host", frame)
        if host.shape[:2] != (480, 640):
            self.photo_detections += 1
        return self.inner.detect(frame, upsample)

    def track(self, frame: Any, faces: Any) -> Any:
        return self.inner.track(frame, faces)

    def embed(self, frame: Any, face: Any) -> Any:
        return self.inner.embed(frame, face)

    def reset(self) -> None:
        self.inner.reset()


def _session(store: PresetStore, analyser: Any, source: Source, on_frame: Any) -> Session:
    cfg = AppConfig(capture=CaptureConfig(kind="test pattern", width=640, height=480))
    return Session(cfg, on_frame=on_frame, source_factory=lambda c: source, presets=store,
                   engine_factory=lambda c: Engine(c.engine, analyser=analyser, cache=c.cache))



def test_switch_takes_the_next_frame_with_no_black_or_unswapped_frame(
        store: PresetStore, analyser: Any, clip: GuardClip) -> None:
    counting = _Counting(analyser)
    source = LockstepSource(clip.frames)
    outs: dict[int, Frame] = {}
    asked: dict[str, Any] = {}

    def on_frame(frame: Frame, t_ns: int) -> None:
        i = source.current
        outs[i] = frame.copy()
        try:
            if i == 8:  # the control API asks for a switch while frame 8 is on its way
                def ask() -> None:
                    asked["preset"] = session.switch_preset("hanks")
                threading.Thread(target=ask).start()
                asked["pending"] = wait_for(lambda: session.runner is not None and
                                         session.runner.switch_pending)
        finally:
            source.turn.release()

    session = _session(store, counting, source, on_frame)
    session.switch_preset("Astro")  # stopped: builds the engine, checks the photo
    ready = session.preload_presets()
    assert ready["Astro"] is None and ready["Hanks"] is None
    assert "file not found" in str(ready["Gone"]) and "no face" in str(ready["Wall"])
    assert ready["Neural"] == "other models: prepared when switched to"
    detections = counting.photo_detections
    session.start()
    assert wait_for(lambda: session.source_ended)
    session.stop(2.0)
    assert asked["pending"] and asked["preset"].name == "Hanks"
    assert session.active_preset == "Hanks" and session.runner is None
    assert counting.photo_detections == detections  # preloaded: the switch detected nothing
    assert source.opens == 1  # the camera was never reopened
    assert sorted(outs) == list(range(len(clip.frames)))
    for i, out in outs.items():
        assert out.mean() > 40, f"frame {i} is black"
        assert unaltered_faces(out, clip.frames[i], clip.faces[i]) == [], f"frame {i}"
    # frame 9, the next one, is already the new preset's face, frame 8 still the old one's
    def face_diff(out: Frame, photo: str, i: int) -> float:
        ref = Engine(ENGINE, analyser=analyser, cache=AppConfig().cache)
        ref.set_source(load_image(store.load(photo).source.path))
        expected = ref.process(clip.frames[i].copy()).output
        core = clip.faces[i]["A"].round().astype(int)
        (x0, y0), (x1, y1) = core.min(0), core.max(0)
        return float(np.abs(out[y0:y1, x0:x1].astype(int) - expected[y0:y1, x0:x1]).mean())

    assert face_diff(outs[9], "Hanks", 9) < 0.5 * face_diff(outs[9], "Astro", 9)
    assert face_diff(outs[8], "Astro", 8) < 0.5 * face_diff(outs[8], "Hanks", 8)


def test_a_first_preset_that_cannot_be_used_claims_nothing_is_kept(
        store: PresetStore, analyser: Any, clip: GuardClip) -> None:
    """A new user's trial: `live --preset P` with P's photo gone said "the stream keeps its
    source face" before any stream or face existed."""
    session = _session(store, analyser, LockstepSource(clip.frames), lambda f, t: None)
    with pytest.raises(PresetError) as exc:
        session.switch_preset("Gone")
    assert "file not found" in str(exc.value) and "keeps" not in str(exc.value)


def test_a_reference_preset_is_ready_only_with_a_reference_photo(
        store: PresetStore, analyser: Any, clip: GuardClip, astronaut_path: Path) -> None:
    """An option trial: `live --control-port` said "preset Ref: ready" of a preset that swaps
    the person in a reference photo, with none given, and every switch to it was refused."""
    store.save(Preset.of("Ref", AppConfig(engine=dataclasses.replace(
        ENGINE, face_selector="reference")), PresetSource(path=str(astronaut_path))))
    session = _session(store, analyser, LockstepSource(clip.frames), lambda f, t: None)
    session.switch_preset("Astro")
    assert "a reference photo, and none is given" in str(session.preload_presets()["Ref"])
    # a new user's trial: the control API's switch to it answered 200 and froze the stream
    with pytest.raises(PresetError, match=r"needs a reference photo.*keeps preset 'Astro'"):
        session.switch_preset("Ref")
    assert session.active_preset == "Astro"
    session.set_reference(load_image(astronaut_path))
    assert session.preload_presets()["Ref"] is None
    assert session.switch_preset("Ref").engine.face_selector == "reference"


def test_a_preset_that_cannot_be_used_is_refused_and_the_stream_keeps_its_preset(
        store: PresetStore, analyser: Any, clip: GuardClip) -> None:
    got: list[int] = []
    session = _session(store, analyser, FramesSource(clip.frames, fps=15),
                       lambda f, t: got.append(1))
    session.switch_preset("Astro")
    astro = session.source_path
    session.start()
    try:
        assert wait_for(lambda: len(got) >= 3)
        with pytest.raises(PresetError, match="file not found; the stream keeps preset 'Astro'"):
            session.switch_preset("Gone")
        with pytest.raises(PresetError, match="'Wall': refused: no face in source"):
            session.switch_preset("Wall")
        with pytest.raises(PresetNotFoundError, match="'Nope': not found"):
            session.switch_preset("Nope")
        # other models that cannot be loaded (no neural model here): the classic engine is
        # built again with its face
        with pytest.raises(PresetError, match=r"'Neural': refused: .*models"):
            session.switch_preset("Neural")
        n = len(got)
        assert wait_for(lambda: len(got) >= n + 3)  # the stream carries on
        assert session.active_preset == "Astro" and not session.preset_modified
        assert session.source_path == astro and session.config.engine == ENGINE
        engine = session.engine
        assert isinstance(engine, Engine) and engine.source_path == astro
        assert session.runner is not None and session.runner.errors == 0
        assert any("switch refused" in s for s in session.statuses)
    finally:
        session.stop(2.0)


def test_stopped_switch_save_rename_delete(store: PresetStore, analyser: Any,
                                           astronaut_path: Path) -> None:
    session = _session(store, analyser, FramesSource([np.zeros((48, 64, 3), np.uint8)]),
                       None)
    revision = session.revision
    session.switch_preset("hanks")
    assert session.config.engine == ENGINE and session.active_preset == "Hanks"
    assert session.revision > revision and session.source_face_box is None
    revision = session.revision
    session.set_swap(False)
    assert session.revision > revision and not session.swap_on
    session.set_guard("blur")
    assert session.preset_modified and session.config.effective_engine().detect_every == 1
    saved = session.save_preset("Hanks blur")
    assert saved.guard.mode == "blur" and not session.preset_modified
    assert store.load("hanks blur").source.path == store.load("Hanks").source.path
    assert session.rename_preset("Hanks blur", "Blurred") == "Blurred"
    assert session.active_preset == "Blurred"
    session.delete_preset("blurred")
    assert session.active_preset is None and "Blurred" not in store.names()
    with pytest.raises(PresetError, match="refused: no face"):
        session.switch_preset("Wall")
    assert session.config.engine == ENGINE  # still Hanks's
    info = session.presets_info()
    assert [p["name"] for p in info["presets"]] == ["Astro", "Gone", "Hanks", "Neural", "Wall"]
    status = session.status()
    assert status["guard"]["mode"] == "blur" and status["detect_every"] == 1
    assert status["source"] == store.load("Hanks").source.path


def test_a_preset_saved_with_auto_shares_the_models_of_the_engine_auto_chose(
        tmp_path: Path) -> None:
    """`live -s PHOTO` runs the engine ``auto`` resolved to; presets saved with the defaults
    say ``auto`` and were all "other models: prepared when switched to", so a switch stalled
    the stream for a second (a new user's trial)."""
    from livefuse.config import EngineConfig
    from livefuse.session import _same_models

    empty = str(tmp_path / "no-models")
    auto = EngineConfig(engine="auto", models_dir=empty)
    assert _same_models(auto, EngineConfig(engine="classic", models_dir=empty))
    assert not _same_models(auto, EngineConfig(engine="neural", models_dir=empty))
    assert not _same_models(EngineConfig(engine="classic", models_dir=empty),
                            EngineConfig(engine="classic", models_dir=str(tmp_path)))


def test_a_recording_is_never_a_stored_presets_photo(store: PresetStore, tmp_path: Path) -> None:
    """A new user's trial: `live --record` replaced another preset's photo (one named with a
    video suffix), exit 0: only the session's own inputs were checked, while the control API
    switches to any preset."""
    from livefuse.config import OutputConfig
    from livefuse.io.paths import OutputIsInputError

    photo = Path(store.load("Hanks").source.path)
    named = photo.with_suffix(".mp4")
    photo.rename(named)  # a photo whose name says video: the recording's suffix check passes
    store.save(Preset.of("Hanks", AppConfig(engine=ENGINE), PresetSource(path=str(named))))
    cfg = AppConfig(capture=CaptureConfig(kind="test pattern"),
                    output=OutputConfig(record=str(named)))
    session = Session(cfg, presets=store)
    with pytest.raises(OutputIsInputError, match="preset Hanks's photo"):
        session.check_outputs()
    elsewhere = OutputConfig(record=str(tmp_path / "rec.mp4"))
    session.check_outputs(AppConfig(capture=CaptureConfig(kind="test pattern"),
                                    output=elsewhere))
