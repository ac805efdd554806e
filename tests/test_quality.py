"""The quality gate: PSNR/SSIM on the face region of a variant against its reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from livefuse.bench import bench_quality
from livefuse.config import EngineConfig
from livefuse.quality import face_region, psnr_ssim
from livefuse.types import Face


def test_identical_regions_are_inf_db_and_ssim_one() -> None:
    a = np.random.default_rng(0).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    assert psnr_ssim(a, a.copy()) == (math.inf, 1.0)
    b = a.copy()
    b[10:20, 10:20] = 0
    p, s = psnr_ssim(a, b)
    # PSNR of a known error: 100 px zeroed out of 2000, per channel MSE = mean(a^2 there)/20
    mse = float(((a.astype(float) - b) ** 2).mean())
    assert p == pytest.approx(10 * math.log10(255 ** 2 / mse), rel=1e-6)
    assert 0 < s < 1


def test_face_region_is_the_union_of_the_boxes_clipped() -> None:
    faces = [Face(bbox=np.array([-10, 5, 30, 40], np.float32), kps=np.zeros((5, 2), np.float32)),
             Face(bbox=np.array([50, 20, 120.5, 60], np.float32),
                  kps=np.zeros((5, 2), np.float32))]
    assert face_region(faces, (100, 100, 3)) == (slice(5, 60), slice(0, 100))
    assert face_region([], (100, 100, 3)) is None


def test_bench_quality_prints_every_row_and_says_what_it_skips() -> None:
    lines: list[str] = []
    rows = bench_quality(frames=8, base=EngineConfig(face_selector="one", detect_every=1),
                         out=lines.append)
    names = [r.name for r in rows]
    assert names == ["fp16 vs fp32", "cache vs no cache", "enhancer on vs off",
                     "masks on vs off"]
    cache = rows[1]
    assert cache.frames == 8
    # the first frame is a miss (identical), later hits re-warp an older render: close, not equal
    assert cache.psnr_min > 30 and cache.ssim_min > 0.95 and cache.ssim_mean < 1.0
    # PSNR and SSIM only: no perceptual metric is claimed that has no code (LPIPS needs
    # backbone weights that no package here installs)
    assert not any("LPIPS" in line for line in lines)
    assert "n/a" in rows[0].note
