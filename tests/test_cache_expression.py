"""The pose cache sees a talking mouth and a blink on both engines (issue 17, item 1).

A scripted talking clip (:mod:`livefuse.testing.talking`): one face of insightface's t1.jpg,
head still, the mouth opening and closing every few frames and the eyes blinking, landmarks
scripted on dlib's real fit of that face (68 points for the classic engine, insightface's
106-point layout for the neural one) with 0.3 px of noise (0.6 % of the eye distance, dlib's
jitter on a still face), through the real Engine, cache and renderers and, on the neural engine,
the real 2d106det runner (a replica) on every frame. 0 stale frames while talking, >= 70 % hits
on a still face.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from synthetic_faces import build_arcface, build_scrfd

from livefuse.config import CacheConfig, EngineConfig
from livefuse.faces.landmarker import OrtLandmarker
from livefuse.imaging import load_image
from livefuse.swap.neural_engine import NeuralPaths, build_neural
from livefuse.testing import talking as T
from livefuse.testing.replica_landmark import build_landmark106_replica
from livefuse.testing.synthetic import build_synthetic_inswapper
from livefuse.types import Face

THRESHOLD = 0.8  # the default
ENGINES = ["classic", "neural"]


@pytest.fixture(scope="module")
def t1_scene(analyser: Any, t1_path: Path) -> tuple[np.ndarray, Face]:
    return T.scene(load_image(t1_path).bgr, analyser)


@pytest.fixture(scope="module")
def source(analyser: Any, astronaut_path: Path) -> tuple[np.ndarray, Face]:
    photo = load_image(astronaut_path).bgr
    return photo, analyser.detect(photo)[0]


@pytest.fixture(scope="module")
def neural_paths(tmp_path_factory: pytest.TempPathFactory) -> NeuralPaths:
    d = tmp_path_factory.mktemp("expr_models")
    return NeuralPaths(build_scrfd(d / "det.onnx"), build_arcface(d / "rec.onnx"),
                       build_synthetic_inswapper(d / "inswapper.onnx", width=8),
                       landmarker=build_landmark106_replica(d / "2d106det.onnx"))


def _clip(kind: str, script: T.Script, t1_scene: tuple[np.ndarray, Face],
          source: tuple[np.ndarray, Face], paths: NeuralPaths, landmarks: bool = True) -> T.Clip:
    cache = CacheConfig(enabled=True, threshold=THRESHOLD, refresh_every_n=5)
    if kind == "classic":
        return T.classic_clip(t1_scene, script, source, cache)
    cfg = EngineConfig(engine="neural", backend="onnxruntime", precision="fp32", device="cpu")
    assert paths.landmarker is not None
    return T.neural_clip(t1_scene, script, build_neural(cfg, paths)[1],
                       OrtLandmarker(paths.landmarker) if landmarks else None, cache)


@pytest.mark.parametrize("kind", ENGINES)
def test_a_talking_face_is_never_served_stale(kind: str, t1_scene: tuple[np.ndarray, Face],
                                             source: tuple[np.ndarray, Face],
                                             neural_paths: NeuralPaths) -> None:
    r = T.run_clip(_clip(kind, T.talking_script(), t1_scene, source, neural_paths),
                 T.reach(THRESHOLD))
    assert r.must_miss >= 30  # the script really moves the mouth and the eyes
    assert r.stale == 0, f"{r.stale} stale frames of {r.hits} hits"
    assert r.hits >= 10  # and small moves are still served from the cache


@pytest.mark.parametrize("kind", ENGINES)
def test_a_still_silent_face_is_served_from_the_cache(kind: str,
                                                      t1_scene: tuple[np.ndarray, Face],
                                                      source: tuple[np.ndarray, Face],
                                                      neural_paths: NeuralPaths) -> None:
    clip = _clip(kind, T.still_script(), t1_scene, source, neural_paths)
    r = T.run_clip(clip, T.reach(THRESHOLD))
    assert r.stale == 0
    assert clip.engine.cache.stats.hit_rate >= 0.7, clip.engine.cache.stats
    if kind == "neural":  # the landmarker ran on every frame
        assert clip.engine.landmarker.calls == 60  # type: ignore[union-attr]


def test_a_neural_face_without_landmarks_is_never_reused(t1_scene: tuple[np.ndarray, Face],
                                                         source: tuple[np.ndarray, Face],
                                                         neural_paths: NeuralPaths) -> None:
    """5 kps show no mouth: such a face is rendered afresh every frame, never guessed at."""
    clip = _clip("neural", T.still_script(20), t1_scene, source, neural_paths, landmarks=False)
    assert T.run_clip(clip, T.reach(THRESHOLD)).hits == 0
    assert clip.engine.cache.stats.misses == 20


def test_the_classic_key_reads_real_mouths(t1_path: Path, analyser: Any) -> None:
    """Real pixels, no script: on t1.jpg dlib's fit puts the one wide-open smile (teeth
    showing, face 3) well above the closed mouths (faces 0 and 2) in the key's mouth_open."""
    from livefuse.cache import pose_key

    photo = load_image(t1_path).bgr
    keys = [pose_key(photo, f) for f in analyser.detect(photo)]
    assert keys[3].mouth_open > 0.18
    assert max(keys[0].mouth_open, keys[2].mouth_open) < 0.09
    assert keys[3].mouth_open - max(keys[0].mouth_open, keys[2].mouth_open) > T.reach(THRESHOLD)
