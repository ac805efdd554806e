"""The least-squares similarity every face's alignment and every cache hit's re-warp use."""

from __future__ import annotations

import numpy as np

from livefuse.faces.align import umeyama


def _svd_umeyama(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Umeyama (1991) through the SVD, written out here as the reference."""
    n, d = src.shape
    mu_s, mu_d = src.mean(0), dst.mean(0)
    s0, d0 = src - mu_s, dst - mu_d
    cov = d0.T @ s0 / n
    sign = np.ones(d)
    if np.linalg.det(cov) < 0:
        sign[-1] = -1
    u, sv, vt = np.linalg.svd(cov)
    r = u @ np.diag(sign) @ vt
    scale = (sv * sign).sum() / ((s0 ** 2).sum() / n)
    t = np.eye(d + 1)
    t[:d, :d] = scale * r
    t[:d, d] = mu_d - scale * (r @ mu_s)
    return t


def test_the_plane_closed_form_is_umeyamas_solution() -> None:
    rng = np.random.default_rng(0)
    for i in range(500):
        src = rng.normal(0, 100, (5 + i % 64, 2))
        ang = rng.uniform(-np.pi, np.pi)
        rot = np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]])
        dst = src @ rot.T * rng.uniform(0.1, 4) + rng.normal(0, 80, 2)
        dst += rng.normal(0, 5 if i % 2 else 60, dst.shape)  # noisy: a real least squares
        if i % 5 == 0:
            dst[:, 0] *= -1  # a mirrored target: the best proper similarity, no reflection
        got, want = umeyama(src, dst), _svd_umeyama(src, dst)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-7 * (1 + np.abs(want).max()))
        assert np.linalg.det(got[:2, :2]) >= 0


def test_other_dimensions_still_take_the_svd() -> None:
    rng = np.random.default_rng(1)
    src = rng.normal(0, 1, (10, 3))
    dst = src * 2.0 + 1.0 + rng.normal(0, 0.01, (10, 3))
    np.testing.assert_allclose(umeyama(src, dst), _svd_umeyama(src, dst), atol=1e-12)


def test_coincident_points_give_the_translation_only() -> None:
    src = np.ones((3, 2))
    dst = np.full((3, 2), 5.0)
    t = umeyama(src, dst)
    np.testing.assert_allclose(t[:2, :2], np.eye(2))
    np.testing.assert_allclose(t[:2, 2], [4.0, 4.0])
