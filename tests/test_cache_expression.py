"""The pose cache sees a talking mouth and a blink on both engines (issue 17, item 1).

A scripted talking clip: one face, head still, on a real photo (a face of insightface's t1.jpg);
the mouth opens and closes every few frames and the eyes blink. Landmarks are scripted (random
weights do not see mouths): the classic engine gets dlib's 68-point fit of that face with the
lower lip and the upper lids moved, the neural engine insightface's 106-point layout with the
same expression, both with 0.3 px of landmark noise (0.6 % of the eye distance), through the
real Engine, cache, renderer and (neural) the real 2d106det runner, whose answer is then
replaced by the script.

"Stale": a frame served from the cache although the mouth or eye openness moved, since the frame
the cached swap was rendered on, by more than the threshold's reach (the openness change that
alone brings the similarity below the threshold: ``OPENNESS_SIGMA * sqrt(-2 ln threshold)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from synthetic_faces import build_arcface, build_scrfd

from livefuse.cache import OPENNESS_SIGMA
from livefuse.config import CacheConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.faces.landmarker import OrtLandmarker
from livefuse.faces.landmarks import kps_from_landmarks, mouth_open_ratio
from livefuse.imaging import LoadedImage, load_image
from livefuse.swap.classic import ClassicSwapper
from livefuse.swap.neural_engine import NeuralPaths, build_neural
from livefuse.testing.face_points import LIP, MOUTH_WIDTH, face_points_106, kps_of_106
from livefuse.testing.replica_landmark import build_landmark106_replica
from livefuse.testing.scripted import ScriptedFaces, ScriptedLandmarker
from livefuse.testing.synthetic import build_synthetic_inswapper
from livefuse.types import Face

THRESHOLD = 0.8  # the default
REACH = OPENNESS_SIGMA * math.sqrt(-2 * math.log(THRESHOLD))  # 0.080
NOISE_PX = 0.3  # ~0.6 % of the eye distance (50 px): dlib's jitter on a still face
FRAMES = 90
OPEN_EYE = 0.30


def talking_script(frames: int = FRAMES, seed: int = 0) -> list[tuple[float, float]]:
    """(mouth, eye) openness per frame: the mouth jumps between levels 0.12 apart (a step is
    1.5x the threshold's reach) every 2-4 frames with small moves (0.03) between, and a blink
    (0.30 → 0.15 → 0.02 → 0.15 → 0.30) every 15 frames."""
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


def still_script(frames: int = 60) -> list[tuple[float, float]]:
    return [(0.0, OPEN_EYE)] * frames


@pytest.fixture(scope="module")
def scene(analyser: Any, t1_path: Path) -> tuple[np.ndarray, Face]:
    """A 400x300 crop of t1.jpg around its third face and dlib's fit of that face."""
    photo = load_image(t1_path).bgr
    face = analyser.detect(photo)[2]
    cx, cy = (face.bbox[:2] + face.bbox[2:]) / 2
    x0, y0 = int(cx) - 200, int(cy) - 150
    frame = np.ascontiguousarray(photo[y0:y0 + 300, x0:x0 + 400])
    faces = analyser.detect(frame)
    assert len(faces) == 1 and faces[0].landmarks is not None
    return frame, faces[0]


# -- the two landmark schemes, with the script's expression ---------------------------------------

def _bbox(points: np.ndarray) -> np.ndarray:
    lo, hi = points.min(0), points.max(0)
    pad = 0.1 * (hi - lo)
    return np.concatenate([lo - pad, hi + pad]).astype(np.float32)


def classic_points(base: np.ndarray, mouth: float, eye: float) -> np.ndarray:
    """dlib's 68 points of the photo with the lower lip dropped to ``mouth`` (inner-lip gap over
    inner mouth width, :func:`mouth_open_ratio`) and both upper lids set to eye aspect ``eye``."""
    lm = base.astype(np.float64).copy()
    width = float(np.linalg.norm(lm[60] - lm[64]))
    drop = mouth * width - (mouth_open_ratio(base) * width)
    lm[[55, 56, 57, 58, 59, 65, 66, 67, 5, 6, 7, 8, 9, 10, 11]] += (0.0, drop)
    for upper, lower, corners in (((37, 38), (41, 40), (36, 39)), ((43, 44), (47, 46), (42, 45))):
        ew = float(np.linalg.norm(lm[corners[0]] - lm[corners[1]]))
        for u, lo in zip(upper, lower, strict=True):
            lm[u] = lm[lo] - (0.0, eye * ew)
    return lm.astype(np.float32)


def classic_openness(points: np.ndarray) -> tuple[float, float]:
    """The script's openness of noise-free 68 points (mouth ratio, mean eye aspect ratio)."""
    ears = []
    for e in (points[36:42], points[42:48]):
        d = lambda a, b: float(np.linalg.norm(a - b))  # noqa: E731
        ears.append((d(e[1], e[5]) + d(e[2], e[4])) / (2 * d(e[0], e[3])))
    return mouth_open_ratio(points), float(np.mean(ears))


def neural_points(face: Face, mouth: float, eye: float) -> np.ndarray:
    """insightface's 106-point layout at the photo's face (eyes where dlib found them), the mouth
    region's height over width at ``LIP * 2 / width + mouth`` and the eyes' at ``eye``."""
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


# -- the engines --------------------------------------------------------------------------------

Clip = tuple[Engine, Callable[[int], None], list[tuple[float, float]]]


def _noisy(points: np.ndarray, i: int) -> np.ndarray:
    rng = np.random.default_rng(1000 + i)
    return (points + rng.normal(0.0, NOISE_PX, points.shape)).astype(np.float32)


def classic_clip(scene: tuple[np.ndarray, Face], script: list[tuple[float, float]],
                 astronaut_path: Path, analyser: Any, cache: CacheConfig) -> Clip:
    face = scene[1]
    assert face.landmarks is not None
    source = analyser.detect(load_image(astronaut_path).bgr)[0]
    exact = [classic_points(face.landmarks, m, e) for m, e in script]

    def faces_at(i: int) -> list[Face]:
        if i < 0:
            return [source]
        lm = _noisy(exact[i], i)
        return [Face(bbox=_bbox(lm), kps=kps_from_landmarks(lm), landmarks=lm, score=1.0)]

    cfg = EngineConfig(face_selector="one", smooth=False, rotation="off")
    scripted = ScriptedFaces(faces_at, dim=128)
    engine = Engine(cfg, components=(scripted, ClassicSwapper(cfg)), cache=cache)
    _set_source(engine, scripted, astronaut_path)

    def at(i: int) -> None:
        scripted.index = i

    return engine, at, [classic_openness(p) for p in exact]


@pytest.fixture(scope="module")
def neural_paths(tmp_path_factory: pytest.TempPathFactory) -> NeuralPaths:
    d = tmp_path_factory.mktemp("expr_models")
    return NeuralPaths(build_scrfd(d / "det.onnx"), build_arcface(d / "rec.onnx"),
                       build_synthetic_inswapper(d / "inswapper.onnx", width=8),
                       landmarker=build_landmark106_replica(d / "2d106det.onnx"))


def neural_clip(scene: tuple[np.ndarray, Face], script: list[tuple[float, float]],
                paths: NeuralPaths, cache: CacheConfig, landmarks: bool = True) -> Clip:
    frame, face = scene
    exact = [neural_points(face, m, e) for m, e in script]
    src_points = neural_points(face, 0.0, OPEN_EYE)

    def faces_at(i: int) -> list[Face]:
        pts = src_points if i < 0 else _noisy(exact[i], i)
        return [Face(bbox=_bbox(pts), kps=kps_of_106(pts), score=0.9)]

    cfg = EngineConfig(engine="neural", backend="onnxruntime", precision="fp32", device="cpu",
                       face_selector="one", smooth=False, rotation="off")
    renderer = build_neural(cfg, paths)[1]
    scripted = ScriptedFaces(faces_at)
    assert paths.landmarker is not None
    landmarker = ScriptedLandmarker(lambda i: [_noisy(exact[i], i)],
                                    inner=OrtLandmarker(paths.landmarker))
    engine = Engine(cfg, components=(scripted, renderer), cache=cache,
                    landmarker=landmarker if landmarks else None)
    _set_source(engine, scripted, None, frame)

    def at(i: int) -> None:
        scripted.index = landmarker.index = i

    return engine, at, [neural_openness(m, e) for m, e in script]


def _set_source(engine: Engine, scripted: ScriptedFaces, path: Path | None,
                image: np.ndarray | None = None) -> None:
    scripted.index = -1
    bgr = load_image(path).bgr if path is not None else image
    assert bgr is not None
    engine.set_source(LoadedImage(bgr=bgr, alpha=None, path=path))


def run(clip: Clip, frame: np.ndarray) -> tuple[int, int, int]:
    """Run the clip; returns (hits, stale frames, frames that had to miss)."""
    engine, at, truth = clip
    hits = stale = must_miss = 0
    cached = 0  # the frame the reusable swap was rendered on
    for i in range(len(truth)):
        at(i)
        packet = engine.process(frame.copy(), i, t_capture_ns=i * 33_333_333)
        assert packet.swapped == 1
        moved = max(abs(a - b) for a, b in zip(truth[i], truth[cached], strict=True))
        must_miss += moved > REACH
        if packet.cache_hits:
            hits += 1
            stale += moved > REACH
        else:
            cached = i
    return hits, stale, must_miss


ENGINES = ["classic", "neural"]


def _clip(kind: str, script: list[tuple[float, float]], scene: tuple[np.ndarray, Face],
          astronaut_path: Path, analyser: Any, neural_paths: NeuralPaths,
          landmarks: bool = True) -> Clip:
    cache = CacheConfig(enabled=True, threshold=THRESHOLD, refresh_every_n=5)
    if kind == "classic":
        return classic_clip(scene, script, astronaut_path, analyser, cache)
    return neural_clip(scene, script, neural_paths, cache, landmarks)


@pytest.mark.parametrize("kind", ENGINES)
def test_a_talking_face_is_never_served_stale(kind: str, scene: tuple[np.ndarray, Face],
                                             astronaut_path: Path, analyser: Any,
                                             neural_paths: NeuralPaths) -> None:
    clip = _clip(kind, talking_script(), scene, astronaut_path, analyser, neural_paths)
    hits, stale, must_miss = run(clip, scene[0])
    assert must_miss >= 30  # the script really moves the mouth and the eyes
    assert stale == 0, f"{stale} stale frames of {hits} hits"
    assert hits >= 10  # and small moves are still served from the cache


@pytest.mark.parametrize("kind", ENGINES)
def test_a_still_silent_face_is_served_from_the_cache(kind: str, scene: tuple[np.ndarray, Face],
                                                      astronaut_path: Path, analyser: Any,
                                                      neural_paths: NeuralPaths) -> None:
    clip = _clip(kind, still_script(), scene, astronaut_path, analyser, neural_paths)
    engine = clip[0]
    stale = run(clip, scene[0])[1]
    assert stale == 0
    assert engine.cache.stats.hit_rate >= 0.7, engine.cache.stats
    if kind == "neural":
        assert engine.landmarker.calls == 60  # type: ignore[union-attr]  # every cached frame


def test_a_neural_face_without_landmarks_is_never_reused(scene: tuple[np.ndarray, Face],
                                                         astronaut_path: Path, analyser: Any,
                                                         neural_paths: NeuralPaths) -> None:
    """5 kps show no mouth: such a face is rendered afresh every frame, never guessed at."""
    clip = _clip("neural", still_script(20), scene, astronaut_path, analyser, neural_paths,
                 landmarks=False)
    hits, _, _ = run(clip, scene[0])
    assert hits == 0 and clip[0].cache.stats.misses == 20
