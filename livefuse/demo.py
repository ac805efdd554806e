"""`livefuse demo`: the whole offline path on real photos, in well under a minute on 2 cores.

1. The astronaut (skimage) is the source face, swapped onto every face of insightface's t1.jpg.
2. A 3-second 640x480 clip with a 440 Hz audio track is built from t1.jpg with synthetic
   camera motion (pan, zoom, roll) around one face, and run through the same engine, audio kept.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from livefuse.config import EngineConfig
from livefuse.engine import Engine
from livefuse.errors import LivefuseError
from livefuse.imaging import load_image, save_image
from livefuse.io.synthetic import motion_clip, write_clip
from livefuse.run import RunSummary, run_image, run_video
from livefuse.samples import astronaut, clip_face, insightface_image

DEMO_FILES = ("source_astronaut.png", "t1_swapped.jpg", "clip.mp4", "clip_swapped.mp4")
"""What the demo writes into its folder."""
MARKER = ".livefuse-demo"
"""Left in a demo folder: a later demo may replace the files there (they are its own)."""

CLIP_SIZE = (640, 480)
CLIP_FRAMES = 90
CLIP_RATE = Fraction(30)


def build_clip(engine: Engine, path: Path, size: tuple[int, int] = CLIP_SIZE,
               frames: int = CLIP_FRAMES) -> Path:
    """Write the demo clip: camera motion over t1.jpg centred on its largest frontal face
    (:func:`~livefuse.samples.clip_face`)."""
    photo = load_image(insightface_image("t1.jpg")).bgr
    face = clip_face(engine.analyser.detect(photo), photo.shape)
    cx, cy = float(face.bbox[0] + face.bbox[2]) / 2, float(face.bbox[1] + face.bbox[3]) / 2
    return write_clip(motion_clip(photo, size, frames, centre=(cx, cy), face_px=face.width),
                      path, rate=CLIP_RATE)


def check_out_dir(out_dir: Path) -> None:
    """Refuse a demo folder that cannot be one.

    Raises:
        LivefuseError: ``out_dir`` is a file, or lies under one, or holds files of the names the
            demo writes that no demo wrote (a folder with :data:`MARKER` is a demo's).
    """
    blocker = next((p for p in (out_dir.absolute(), *out_dir.absolute().parents)
                    if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        # the path once when it is the file itself (a new user's trial read it twice)
        where = "" if blocker == out_dir.absolute() else f": '{blocker}' above it"
        raise LivefuseError(f"demo output folder '{out_dir}'{where} is a file; give a folder "
                            "(--out)")
    if not out_dir.is_dir() or (out_dir / MARKER).exists():
        return
    present = [name for name in DEMO_FILES if (out_dir / name).exists()]
    # an earlier version's demo folder (no marker): its four files and nothing else
    if present and sorted(p.name for p in out_dir.iterdir()) != sorted(DEMO_FILES):
        # `--out ~/Videos` replaced the user's own clip.mp4 without a word (a new user's trial)
        raise LivefuseError(f"demo output folder '{out_dir}' holds files of the names the demo "
                            f"writes ({', '.join(present)}) that no demo wrote; give a new or "
                            "empty folder (--out)")


def run_demo(out_dir: Path, progress: bool = True,
             config: EngineConfig | None = None) -> list[RunSummary]:
    """Run the demo into ``out_dir`` (created). Returns the image and the clip summaries.

    Raises:
        LivefuseError: see :func:`check_out_dir`.
    """
    check_out_dir(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MARKER).write_text("written by `livefuse demo`: a later demo replaces its files\n",
                                  encoding="utf-8")
    source_path = save_image(out_dir / "source_astronaut.png", astronaut())
    engine = Engine(config or EngineConfig(detect_every=3))
    engine.set_source(load_image(source_path))
    image = run_image(engine, insightface_image("t1.jpg"), out_dir / "t1_swapped.jpg")
    clip = build_clip(engine, out_dir / "clip.mp4")
    video = run_video(engine, clip, out_dir / "clip_swapped.mp4", progress=progress)
    return [image, video]
