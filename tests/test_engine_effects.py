"""Masks and the face enhancer inside Engine.process: the occlusion mask keeps what is in front of
a face, and with the pose cache on the enhancer runs on cache misses only (its patch is stored
and re-warped with the swap's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from replica_models import landmark_replica
from synthetic_faces import block_face_frame, build_arcface, build_scrfd

from livefuse.config import CacheConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import LoadedImage
from livefuse.swap.enhance import FaceEnhancer
from livefuse.swap.neural_engine import NeuralPaths, build_landmarker, build_neural
from livefuse.testing import replicas_masks as R
from livefuse.testing.synthetic import build_synthetic_inswapper


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> NeuralPaths:
    d = tmp_path_factory.mktemp("fx_models")
    return NeuralPaths(build_scrfd(d / "det.onnx"), build_arcface(d / "rec.onnx"),
                       build_synthetic_inswapper(d / "inswapper.onnx", width=4),
                       occluder=R.build_replica("occluder", d / "xseg.onnx"),
                       landmarker=landmark_replica())


@pytest.fixture(scope="module")
def enhancer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return R.export_gfpgan(R.random_unet_enhancer(0), tmp_path_factory.mktemp("enh") / "e.onnx")


def _engine(paths: NeuralPaths, cache: CacheConfig | None = None, **kw: object) -> Engine:
    cfg = EngineConfig(engine="neural", backend="onnxruntime", precision="fp32", device="cpu",
                       smooth=False, **kw)  # type: ignore[arg-type]
    analyser, renderer = build_neural(cfg, paths)
    # the cache reads the mouth and eyes from the 106-point landmarker (a replica)
    landmarker = None if cache is None else build_landmarker(cfg, renderer, paths)
    eng = Engine(cfg, components=(analyser, renderer), cache=cache, landmarker=landmarker)
    eng.set_source(LoadedImage(bgr=block_face_frame((5, 6), 1), alpha=None, path=Path("src.png")))
    return eng


def test_occlusion_mask_keeps_an_object_in_front_of_the_face(paths: NeuralPaths) -> None:
    """A bar of the occluder replica's key colour across the face stays as it is with the
    occlusion mask on, and is painted over by the swap without it. (The replica is set to call
    that colour occluded: this proves the plumbing through the engine, not XSeg's accuracy.)"""
    frame = block_face_frame((10, 9), 2)
    bar = (slice(326, 344), slice(250, 390))  # below the white block the detector sees
    frame[bar] = R.KEY_BGR
    plain = _engine(paths).process(frame.copy())
    masked = _engine(paths, face_mask_types=("occlusion",)).process(frame.copy())
    assert plain.swapped == 1 and masked.swapped == 1
    assert plain.output is not None and masked.output is not None
    core = (slice(329, 341), slice(280, 360))
    assert np.abs(plain.output[core].astype(int) - frame[core]).mean() > 10
    assert np.abs(masked.output[core].astype(int) - frame[core]).mean() < 2
    # the face around the bar is still swapped
    above = (slice(270, 295), slice(280, 360))
    assert np.abs(masked.output[above].astype(int) - frame[above]).mean() > 5


class _CountingEnhancer(FaceEnhancer):
    calls = 0
    faces = 0

    def enhance_host(self, frame, kps, blend=None):  # type: ignore[no-untyped-def,override]
        type(self).calls += 1
        type(self).faces += len(kps)
        return super().enhance_host(frame, kps, blend)


def test_enhancer_runs_on_cache_misses_only(paths: NeuralPaths, enhancer_file: Path) -> None:
    frames = [block_face_frame((10, 9), 2)] * 12
    outs = {}
    for cached in (False, True):
        _CountingEnhancer.calls = _CountingEnhancer.faces = 0
        enh = _CountingEnhancer(enhancer_file, "onnxruntime", blend=100)
        eng = _engine(paths, CacheConfig(enabled=cached, threshold=0.9, refresh_every_n=4))
        eng.enhancer = enh
        outs[cached] = [eng.process(f.copy(), i, t_capture_ns=i * 33_000_000) for i, f
                        in enumerate(frames)]
        if cached:
            st = eng.cache.stats
            assert st.hits == 9 and _CountingEnhancer.faces == 3  # misses at frames 0, 4, 8
        else:
            assert _CountingEnhancer.faces == 12
    plain = _engine(paths).process(frames[0].copy()).output
    for a, b in zip(outs[False], outs[True], strict=True):
        assert a.swapped == b.swapped == 1
        # a still frame: the re-warped swap + enhancer layers land on the same pixels
        assert np.abs(a.output.astype(int) - b.output.astype(int)).max() <= 1
    # the enhancer did change the face
    assert np.abs(outs[False][0].output.astype(int) - plain.astype(int)).mean() > 0.5


def test_mask_settings_change_in_place_and_bad_ones_are_refused(paths: NeuralPaths) -> None:
    from livefuse.errors import ConfigError

    eng = _engine(paths, face_mask_types=("box",))
    cfg = eng.config
    from dataclasses import replace

    assert eng.apply(replace(cfg, face_mask_blur=0.1, face_mask_padding=(10, 0, 0, 0)))
    assert eng.renderer.masker.padding == (10, 0, 0, 0)  # type: ignore[attr-defined]
    assert not eng.apply(replace(cfg, face_mask_types=("box", "occlusion")))  # a model to load
    with pytest.raises(ConfigError, match="face_mask_types"):
        replace(cfg, face_mask_types=("hair",)).validate()
    with pytest.raises(ConfigError, match="enhancer"):
        replace(cfg, enhancer="codeformer").validate()
