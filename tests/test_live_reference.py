"""`livefuse live --reference PHOTO` (issue 15, item 8): the reference selector on the live path,
refused at argument parsing without its photo, and the photo reaching every engine the session
builds."""

from __future__ import annotations

import time
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from stub_engine import PassEngine, wait_for

from livefuse.cli import main
from livefuse.config import AppConfig, CaptureConfig, EngineConfig
from livefuse.errors import ConfigError
from livefuse.imaging import LoadedImage, load_image, save_image
from livefuse.io.sources import ImageSource
from livefuse.io.synthetic import write_clip
from livefuse.samples import astronaut, insightface_image
from livefuse.session import Session
from livefuse.types import Frame

# three faces of t1.jpg (dlib boxes in the photo, x0 y0 x1 y1), cut out as a 680x450 frame
CUT = (600, 50)
FACES = [(734, 365, 837, 469), (883, 89, 987, 192), (1125, 296, 1229, 400)]


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Frame]:
    """A clip of three faces, a close-up photo of the middle one, the source photo, the frame."""
    d = tmp_path_factory.mktemp("ref")
    t1 = load_image(insightface_image("t1.jpg")).bgr
    x, y = CUT
    frame = np.ascontiguousarray(t1[y:y + 450, x:x + 680])
    clip = write_clip([frame] * 10, d / "three.mp4", audio=False)
    x0, y0, x1, y1 = FACES[1]
    cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
    close = t1[max(cy - 110, 0):cy + 110, cx - 110:cx + 110]
    ref = save_image(d / "ref.png", cv2.resize(close, None, fx=2, fy=2,
                                                 interpolation=cv2.INTER_CUBIC))
    src = save_image(d / "src.png", astronaut())
    return clip, ref, src, frame


@pytest.mark.parametrize(("extra", "says"), [
    (["--face-selector", "reference"], "--face-selector reference needs --reference PHOTO"),
    (["--reference", "REF", "--face-selector", "many"],
     "--reference is used only with --face-selector reference, not many"),
    (["--reference", "REF", "--target-face-index", "1"], "give one of them"),
])
def test_live_reference_options_are_checked_before_any_work(
        scene: tuple[Path, Path, Path, Frame], extra: list[str], says: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    clip, ref, src, _ = scene
    t0 = time.monotonic()
    args = [str(ref) if a == "REF" else a for a in extra]
    assert main(["live", "-s", str(src), "--video", str(clip), *args]) == 2
    err = capsys.readouterr().err
    assert says in err
    assert "engine:" not in err and "[status]" not in err  # nothing was loaded or opened
    assert time.monotonic() - t0 < 5


def test_live_swaps_only_the_face_nearest_to_the_reference(
        scene: tuple[Path, Path, Path, Frame], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    clip, ref, src, frame = scene
    out = tmp_path / "rec.mp4"
    assert main(["live", "-s", str(src), "--video", str(clip), "--loop", "--reference",
                 str(ref), "--record", str(out), "--duration", "6",
                 "--engine", "classic"]) == 0, capsys.readouterr().err
    with av.open(str(out)) as c:
        last = [f.to_ndarray(format="bgr24") for f in c.decode(video=0)][-1]
    x, y = CUT
    change = [float(np.abs(last[y0 - y:y1 - y, x0 - x:x1 - x].astype(int)
                           - frame[y0 - y:y1 - y, x0 - x:x1 - x].astype(int)).mean())
              for x0, y0, x1, y1 in FACES]
    # the referenced face is swapped; the others differ from the input by H.264 noise only
    assert change[1] > 2.5 * max(change[0], change[2]), change


def _photo(name: str) -> LoadedImage:
    return LoadedImage(bgr=np.zeros((8, 8, 3), np.uint8), alpha=None, path=Path(name))


def test_session_hands_the_reference_to_every_engine_it_builds() -> None:
    """The app's path: the engine is built on the inference thread, and again when a setting
    needs the models reloaded; a new reference photo is taken at a frame boundary."""
    built: list[PassEngine] = []

    def factory(cfg: AppConfig) -> PassEngine:
        built.append(PassEngine(rebuild=True))  # the new engine must get the reference too
        return built[-1]

    config = AppConfig(engine=EngineConfig(face_selector="reference"),
                       capture=CaptureConfig(kind="test pattern", width=64, height=48))
    session = Session(config, engine_factory=factory,
                      source_factory=lambda c: ImageSource(np.zeros((48, 64, 3), np.uint8), 50))
    session.set_source_face(_photo("src.png"))
    with pytest.raises(ConfigError, match="needs a reference photo"):
        session.start()
    session.set_reference(_photo("ref.png"))
    def refs(i: int) -> list[Path]:
        return [r.path for r in built[i].references] if len(built) > i else []

    session.start()
    try:
        assert wait_for(lambda: refs(0) == [Path("ref.png")])
        session.apply(AppConfig(engine=EngineConfig(face_selector="reference", precision="fp32"),
                                capture=config.capture))
        assert wait_for(lambda: len(built) == 2 and refs(1) == [Path("ref.png")])
        session.set_reference(_photo("other.png"))
        assert wait_for(lambda: built[-1].references[-1].path == Path("other.png"))
        with pytest.raises(ConfigError, match="needs a reference photo"):
            Session(config).start()
    finally:
        session.stop()
