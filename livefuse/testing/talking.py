"""A scripted talking face on a real photo, through the real Engine of either engine: the pose
cache's test and benchmark of issue 17 (item 1).

One face, head still, on a crop of a real photo around a face dlib found there. The mouth opens
and closes and the eyes blink by a script; random-weight landmark models do not see mouths, so
the landmarks are scripted too: the classic engine gets dlib's 68-point fit of that face with
the lower lip and the upper lids moved, the neural engine insightface's 106-point layout with the
same expression (:mod:`livefuse.testing.face_points`), both with Gaussian landmark noise. The
neural engine's real 2d106det runner runs on every frame (its cost and wiring are real) before
its answer is replaced by the script.

"Stale": a frame served from the cache although the mouth or eye openness moved, since the frame
the cached swap was rendered on, by more than ``reach`` (by default the threshold's reach: the
openness change that alone brings the similarity under the threshold).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from livefuse.cache import OPENNESS_SIGMA
from livefuse.config import CacheConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.faces.landmarker import Landmarker
from livefuse.faces.landmarks import kps_from_landmarks, mouth_open_ratio
from livefuse.imaging import LoadedImage
from livefuse.testing.face_points import LIP, MOUTH_WIDTH, face_points_106, kps_of_106
from livefuse.testing.scripted import ScriptedFaces, ScriptedLandmarker
from livefuse.types import Face, FloatArray, Frame

OPEN_EYE = 0.30
Script = list[tuple[float, float]]
"""(mouth, eye) openness per frame."""


def reach(threshold: float) -> float:
    """The openness change that alone brings the similarity under ``threshold``."""
    return OPENNESS_SIGMA * math.sqrt(-2 * math.log(threshold))


def talking_script(frames: int = 90, seed: int = 0) -> Script:
    """The mouth jumps between levels 0.12 apart (1.5 times the default threshold's reach)
    every 2-4 frames with small moves (0.03) between, and a blink (0.30 → 0.15 → 0.02 → 0.15
    → 0.30) every 15 frames."""
    rng = np.random.default_rng(seed)
    out = []
    mouth, hold = 0.0, 0
    for i in range(frames):
        if hold == 0:
            mouth = float(rng.choice([0.0, 0.12, 0.24, 0.36]))
            hold = int(rng.integers(2, 5))
        hold -= 1
        wobble = 0.03 * float(rng.integers(-1, 2))
        eye = {0: OPEN_EYE, 1: 0.15, 2: 0.02, 3: 0.15}.get(i % 15 - 10, OPEN_EYE)
        out.append((max(mouth + wobble, 0.0), eye))
    return out


def still_script(frames: int = 60) -> Script:
    return [(0.0, OPEN_EYE)] * frames


def scene(photo: Frame, analyser: Any, index: int = 2) -> tuple[Frame, Face]:
    """A 400x300 crop of ``photo`` around dlib's face ``index`` there, and dlib's fit of the face
    in the crop.

    Raises:
        ValueError: the crop does not hold exactly one face with landmarks.
    """
    face = analyser.detect(photo)[index]
    cx, cy = (face.bbox[:2] + face.bbox[2:]) / 2
    x0, y0 = max(int(cx) - 200, 0), max(int(cy) - 150, 0)
    frame = np.ascontiguousarray(photo[y0:y0 + 300, x0:x0 + 400])
    faces = analyser.detect(frame)
    if len(faces) != 1 or faces[0].landmarks is None:
        raise ValueError(f"the crop around face {index} holds {len(faces)} faces")
    return frame, faces[0]


# -- the two landmark schemes with the script's expression ------------------------------------

def bbox_of(points: np.ndarray) -> FloatArray:
    lo, hi = points.min(0), points.max(0)
    pad = 0.1 * (hi - lo)
    return np.concatenate([lo - pad, hi + pad]).astype(np.float32)


def classic_points(base: np.ndarray, mouth: float, eye: float) -> FloatArray:
    """dlib's 68 points with the lower lip (and chin) dropped to ``mouth`` (inner-lip gap over
    inner mouth width, :func:`mouth_open_ratio`) and both upper lids set to eye aspect ``eye``."""
    lm = base.astype(np.float64).copy()
    width = float(np.linalg.norm(lm[60] - lm[64]))
    drop = (mouth - mouth_open_ratio(base)) * width
    lm[[55, 56, 57, 58, 59, 65, 66, 67, 5, 6, 7, 8, 9, 10, 11]] += (0.0, drop)
    for upper, lower, corners in (((37, 38), (41, 40), (36, 39)), ((43, 44), (47, 46), (42, 45))):
        ew = float(np.linalg.norm(lm[corners[0]] - lm[corners[1]]))
        for u, lo in zip(upper, lower, strict=True):
            lm[u] = lm[lo] - (0.0, eye * ew)
    return lm.astype(np.float32)


def classic_openness(points: np.ndarray) -> tuple[float, float]:
    """(mouth ratio, mean eye aspect ratio) of noise-free 68 points."""
    def d(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.linalg.norm(a - b))

    ears = [(d(e[1], e[5]) + d(e[2], e[4])) / (2 * d(e[0], e[3]))
            for e in (points[36:42], points[42:48])]
    return mouth_open_ratio(points), float(np.mean(ears))


def neural_points(face: Face, mouth: float, eye: float) -> FloatArray:
    """insightface's 106-point layout on a dlib face (its eye centres), the inner-lip gap
    ``mouth`` mouth widths and the eyes' aspect ``eye``."""
    assert face.landmarks is not None
    left, right = face.landmarks[36:42].mean(0), face.landmarks[42:48].mean(0)
    d = right - left
    angle = math.degrees(math.atan2(float(d[1]), float(d[0])))
    centre = (left + right) / 2
    return face_points_106(float(centre[0]), float(centre[1]), float(np.linalg.norm(d)), angle,
                           mouth_gap=mouth * MOUTH_WIDTH, eye_open=eye)


def neural_openness(mouth: float, eye: float) -> tuple[float, float]:
    """The script's openness in the 106-point key's units: the mouth region's height (two lips
    and the gap) over its width, the eye region's height over its width."""
    return (2 * LIP + mouth * MOUTH_WIDTH) / MOUTH_WIDTH, eye


# -- clips through the real Engine ------------------------------------------------------------

@dataclass
class Clip:
    """An engine, the call that moves the script to frame ``i``, and the openness truth."""

    engine: Engine
    at: Callable[[int], None]
    truth: list[tuple[float, float]]
    frame: Frame


def _noisy(points: np.ndarray, i: int, noise_px: float) -> FloatArray:
    rng = np.random.default_rng(1000 + i)
    return (points + rng.normal(0.0, noise_px, points.shape)).astype(np.float32)


def _source(engine: Engine, scripted: ScriptedFaces, image: Frame) -> None:
    scripted.index = -1  # faces_at(-1): the source photo's face
    engine.set_source(LoadedImage(bgr=image, alpha=None, path=Path("source.png")))


def classic_clip(scene_: tuple[Frame, Face], script: Script, source: tuple[Frame, Face],
                 cache: CacheConfig, noise_px: float = 0.3) -> Clip:
    """The classic engine (the real renderer) on the scripted 68 points; ``source``: the
    source photo and dlib's face on it."""
    from livefuse.swap.classic import ClassicSwapper

    frame, face = scene_
    assert face.landmarks is not None
    exact = [classic_points(face.landmarks, m, e) for m, e in script]

    def faces_at(i: int) -> list[Face]:
        if i < 0:
            return [source[1]]
        lm = _noisy(exact[i], i, noise_px)
        return [Face(bbox=bbox_of(lm), kps=kps_from_landmarks(lm), landmarks=lm, score=1.0)]

    cfg = EngineConfig(face_selector="one", smooth=False, rotation="off")
    scripted = ScriptedFaces(faces_at, dim=128)
    engine = Engine(cfg, components=(scripted, ClassicSwapper(cfg)), cache=cache)
    _source(engine, scripted, source[0])

    def at(i: int) -> None:
        scripted.index = i

    return Clip(engine, at, [classic_openness(p) for p in exact], frame)


def neural_clip(scene_: tuple[Frame, Face], script: Script, renderer: Any,
                landmarker: Landmarker | None, cache: CacheConfig,
                noise_px: float = 0.3, config: EngineConfig | None = None) -> Clip:
    """The neural engine (``renderer`` from :func:`~livefuse.swap.neural_engine.build_neural`)
    on the scripted 106 points, after ``landmarker`` (a real one) runs; ``landmarker=None``:
    the faces reach the cache with their kps only. The scene is its own source photo."""
    frame, face = scene_
    exact = [neural_points(face, m, e) for m, e in script]
    src_points = neural_points(face, 0.0, OPEN_EYE)

    def faces_at(i: int) -> list[Face]:
        pts = src_points if i < 0 else _noisy(exact[i], i, noise_px)
        return [Face(bbox=bbox_of(pts), kps=kps_of_106(pts), score=0.9)]

    cfg = config or EngineConfig(engine="neural", backend="onnxruntime", precision="fp32",
                                 device="cpu", face_selector="one", smooth=False, rotation="off")
    scripted = ScriptedFaces(faces_at)
    scripted_lm = ScriptedLandmarker(lambda i: [_noisy(exact[i], i, noise_px)], inner=landmarker)
    engine = Engine(cfg, components=(scripted, renderer), cache=cache,
                    landmarker=scripted_lm if landmarker is not None else None)
    _source(engine, scripted, frame)

    def at(i: int) -> None:
        scripted.index = scripted_lm.index = i

    return Clip(engine, at, [neural_openness(m, e) for m, e in script], frame)


@dataclass(frozen=True)
class ClipResult:
    """Hits, stale hits, frames whose openness moved past the reach (they must miss), frames,
    and the landmark stage's median ms per frame (0 when it did not run)."""

    hits: int
    stale: int
    must_miss: int
    frames: int
    landmarks_ms: float = 0.0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.frames if self.frames else 0.0


def run_clip(clip: Clip, stale_reach: float) -> ClipResult:
    """Run every frame; a hit whose openness moved more than ``stale_reach`` since the frame its
    swap was rendered on is stale."""
    hits = stale = must_miss = 0
    cached = 0
    lm_ms: list[float] = []
    for i in range(len(clip.truth)):
        clip.at(i)
        packet = clip.engine.process(clip.frame.copy(), i, t_capture_ns=i * 33_333_333)
        if "landmarks" in packet.timings_ms:
            lm_ms.append(packet.timings_ms["landmarks"])
        if packet.swapped != 1:
            raise AssertionError(f"frame {i}: {packet.swapped} faces swapped")
        moved = max(abs(a - b) for a, b in zip(clip.truth[i], clip.truth[cached], strict=True))
        must_miss += moved > stale_reach
        if packet.cache_hits:
            hits += 1
            stale += moved > stale_reach
        else:
            cached = i
    return ClipResult(hits, stale, must_miss, len(clip.truth),
                      float(np.median(lm_ms)) if lm_ms else 0.0)


__all__ = ["OPEN_EYE", "Clip", "ClipResult", "classic_clip", "neural_clip", "reach", "run_clip",
           "scene", "still_script", "talking_script"]
