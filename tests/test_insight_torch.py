"""The GPU-path analyser (SCRFD + ArcFace in PyTorch) against the onnxruntime one, on the synthetic
SCRFD / ArcFace models (run on the CPU here; the same code runs on CUDA)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from synthetic_faces import build_arcface, build_scrfd

from livefuse.faces.insight import InsightAnalyser
from livefuse.faces.insight_torch import TorchInsightAnalyser
from livefuse.types import Face, StagedFrame


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("synthetic_models_t")
    return build_scrfd(d / "det.onnx"), build_arcface(d / "rec.onnx")


def _frame(cells: list[tuple[int, int]]) -> np.ndarray:
    """1920x1080 black frame, a white 96 px block per detector cell (cx, cy) (scale 1/3)."""
    frame = np.zeros((1080, 1920, 3), np.uint8)
    for cx, cy in cells:
        frame[96 * cy:96 * (cy + 1), 96 * cx:96 * (cx + 1)] = 255
    return frame


def test_detect_and_embed_match_the_onnxruntime_analyser(models: tuple[Path, Path]) -> None:
    ort = InsightAnalyser(*models)
    tor = TorchInsightAnalyser(*models, device="cpu", precision="fp32")
    frame = _frame([(16, 3), (4, 8), (10, 5)])
    a, b = ort.detect(frame), tor.detect(StagedFrame(host=frame, device=torch.from_numpy(frame)))
    assert len(a) == len(b) == 3
    for fa, fb in zip(a, b, strict=True):
        np.testing.assert_allclose(fb.bbox, fa.bbox, atol=0.5)
        np.testing.assert_allclose(fb.kps, fa.kps, atol=0.5)
        assert abs(fb.score - fa.score) < 1e-3
    photo = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    face = Face(bbox=np.array([200, 150, 360, 330], np.float32),
                kps=np.array([[250, 220], [310, 220], [280, 255], [255, 290], [305, 290]],
                             np.float32))
    cos = float(np.dot(ort.embed(photo, face), tor.embed(photo, face)))
    assert cos > 0.999


def test_track_follows_the_face_and_drops_it_when_it_leaves(models: tuple[Path, Path]) -> None:
    tor = TorchInsightAnalyser(*models, device="cpu", precision="fp32")
    first = tor.detect(_frame([(10, 5)]))[0]
    tracked = Face(bbox=first.bbox, kps=first.kps, score=first.score, track_id=3)
    for cell in ((11, 5), (11, 6), (12, 6)):
        frame = _frame([cell])
        [moved] = tor.track(frame, [tracked])
        [full] = tor.detect(frame)
        assert moved is not None and moved.track_id == 3
        np.testing.assert_allclose(moved.kps, full.kps, atol=1.0)
        tracked = moved
    assert tor.track(_frame([]), [tracked]) == [None]
    assert tor.track(_frame([(2, 1)]), [tracked]) == [None]
