"""`livefuse bench`: the classic engine's fps on the demo clip, printed as a table; with
``--quality``, the quality gate (PSNR/SSIM of each speed or quality option against its reference).

:func:`bench_classic` backs ``benchmarks/bench_classic.py``. It times ``Engine.process`` only (no
decode/encode) on frames held in memory, for 640x480 and 1280x720, detection every 1/3/5 frames,
one face vs every face.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from livefuse.config import CacheConfig, EngineConfig, FaceSelector
from livefuse.engine import Engine
from livefuse.imaging import LoadedImage, load_image, save_image
from livefuse.quality import QualityRow
from livefuse.samples import astronaut, clip_face, insightface_image
from livefuse.types import Frame

SIZES: tuple[tuple[tuple[int, int], int], ...] = (((640, 480), 150), ((1280, 720), 220))
"""(frame size px, face width px) pairs: a webcam close-up at each resolution."""


def git_commit() -> str:
    """Short commit of the livefuse checkout, or ``unknown`` outside one."""
    try:
        return subprocess.check_output(
            ["git", "rev-parse", "--short", "HEAD"], text=True, stderr=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parent).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def _source() -> LoadedImage:
    """The astronaut, read through the file loader as a user's photo is. A fresh private
    folder each time: a fixed name in the shared temp folder was reused whatever it held (a
    new user's trial)."""
    with tempfile.TemporaryDirectory(prefix="livefuse-bench-") as folder:
        return load_image(save_image(Path(folder) / "astronaut.png", astronaut()))


def bench_classic(frames: int = 120, detect_every: tuple[int, ...] = (1, 3, 5),
                  selectors: tuple[FaceSelector, ...] = ("one", "many"),
                  out: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run the classic-engine table and print it through ``out``. Returns the rows."""
    from livefuse.io.synthetic import motion_clip  # PyAV: not needed by the other benchmarks

    photo = load_image(insightface_image("t1.jpg")).bgr
    probe = Engine(EngineConfig())
    face = clip_face(probe.analyser.detect(photo), photo.shape)
    centre = (float(face.bbox[0] + face.bbox[2]) / 2, float(face.bbox[1] + face.bbox[3]) / 2)
    source = _source()
    out(f"# classic engine, commit {git_commit()}, {machine()}, {frames} frames per row")
    out("(selector one: the largest face; many: every face in view; faces: mean faces swapped "
        "per frame)")
    out(f"{'size':<9} {'detect every':>12} {'selector':>8} {'faces':>6} {'fps':>7} "
        f"{'ms/frame p50':>12} "
        f"{'detect ms':>9} {'track ms':>8} {'swap ms':>7}")
    rows = []
    for size, face_w in SIZES:
        clip = list(motion_clip(photo, size, frames, centre=centre, face_px=face.width,
                                face_width=face_w))
        for k in detect_every:
            for selector in selectors:
                engine = Engine(EngineConfig(detect_every=k, face_selector=selector),
                                analyser=probe.analyser)
                engine.set_source(source)
                per, det, trk, swp, nfaces = [], [], [], [], []
                t_all = time.perf_counter()
                for i, f in enumerate(clip):
                    t0 = time.perf_counter()
                    p = engine.process(f, index=i, t_capture_ns=i * 33_333_333)
                    per.append((time.perf_counter() - t0) * 1e3)
                    det.append(p.timings_ms.get("detect", 0.0))
                    trk.append(p.timings_ms.get("track", 0.0))
                    swp.append(p.timings_ms.get("render", 0.0) + p.timings_ms.get("paste", 0.0))
                    nfaces.append(p.swapped)
                fps = len(clip) / (time.perf_counter() - t_all)
                row = {"width": size[0], "height": size[1], "detect_every": k,
                       "selector": selector,
                       "faces": statistics.mean(nfaces), "fps": fps,
                       "p50_ms": statistics.median(per), "detect_ms": statistics.mean(det),
                       "track_ms": statistics.mean(trk), "swap_ms": statistics.mean(swp)}
                rows.append(row)
                out(f"{f'{size[0]}x{size[1]}':<9} {k:>12} {selector:>8} {row['faces']:>6.1f} "
                    f"{fps:>7.1f} "
                    f"{row['p50_ms']:>12.1f} {row['detect_ms']:>9.1f} {row['track_ms']:>8.1f} "
                    f"{row['swap_ms']:>7.1f}")
    return rows


EngineMaker = Callable[[EngineConfig, CacheConfig | None], Engine]


def _default_maker(config: EngineConfig, cache: CacheConfig | None) -> Engine:
    return Engine(config, cache=cache)


def demo_frames(frames: int, size: tuple[int, int] = (640, 480)) -> list[Frame]:
    """The demo clip's frames (camera motion over t1.jpg around its largest face)."""
    from livefuse.faces.dlib_analyser import DlibFaceAnalyser
    from livefuse.io.synthetic import motion_clip

    photo = load_image(insightface_image("t1.jpg")).bgr
    face = clip_face(DlibFaceAnalyser().detect(photo), photo.shape)
    centre = (float(face.bbox[0] + face.bbox[2]) / 2, float(face.bbox[1] + face.bbox[3]) / 2)
    return list(motion_clip(photo, size, frames, centre=centre, face_px=face.width))


def bench_quality(frames: int = 60, base: EngineConfig | None = None,
                  make_engine: EngineMaker = _default_maker, cuda: bool | None = None,
                  clip: list[Frame] | None = None, enhancer: str | None = None,
                  masks: bool = False, period_ns: int = 33_333_333,
                  out: Callable[[str], None] = print) -> list[QualityRow]:
    """Print the quality gate's table for ``base`` (the classic engine by default).

    Rows: fp16 vs fp32 (neural engine on CUDA), cache vs no cache, the enhancer on vs off
    (``enhancer``: its catalog name, when its model is installed) and the masks on vs off
    (``masks``: box + occlusion + region, when their models are installed); a row that cannot
    run says why.
    """
    from livefuse.quality import HEADER, compare

    base = base or EngineConfig(face_selector="one")
    clip = clip if clip is not None else demo_frames(frames)
    source = _source()
    if cuda is None:
        from livefuse.swap.neural_engine import resolve_device

        cuda = resolve_device(base.device).startswith("cuda")
    out(f"# quality gate, {base.engine} engine, commit {git_commit()}, {machine()}, "
        f"{len(clip)} frames, face region only")
    out(HEADER)
    rows: list[QualityRow] = []

    def row(name: str, ref: tuple[EngineConfig, CacheConfig | None],
            var: tuple[EngineConfig, CacheConfig | None], note: str = "") -> None:
        r = compare(name, clip, source, lambda: make_engine(*ref), lambda: make_engine(*var),
                    note=note, period_ns=period_ns)
        rows.append(r)
        out(r.line())

    def skip(name: str, why: str) -> None:
        rows.append(QualityRow(name, note=f"n/a: {why}"))
        out(rows[-1].line())

    neural = base.engine == "neural"
    if neural and cuda:
        row("fp16 vs fp32", (replace(base, precision="fp32"), None),
            (replace(base, precision="fp16"), None))
    else:
        skip("fp16 vs fp32",
             "fp16 runs on CUDA only" if neural else "the classic engine has no precision")
    row("cache vs no cache", (base, None), (base, CacheConfig()),
        note="threshold 0.8, refresh every 5")
    if enhancer is not None:
        row("enhancer on vs off", (base, None), (replace(base, enhancer=enhancer), None),
            note=f"{enhancer}, blend {base.enhancer_blend:.0f}")
    else:
        skip("enhancer on vs off", "no enhancer model installed (livefuse models fetch "
             "gfpgan_1.4)")
    if masks and neural:
        row("masks on vs off", (base, None),
            (replace(base, face_mask_types=("box", "occlusion", "region")), None),
            note="box + occlusion + region")
    else:
        skip("masks on vs off", "needs the neural engine with the xseg and bisenet_resnet34 "
             "models" if not neural else "the xseg / bisenet_resnet34 models are not installed")
    return rows
