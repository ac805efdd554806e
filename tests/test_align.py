"""The least-squares similarity every face's alignment and every cache hit's re-warp use."""

from __future__ import annotations

import numpy as np
from skimage.transform import SimilarityTransform

from livefuse.faces.align import umeyama


def test_the_plane_closed_form_is_umeyamas_solution() -> None:
    """scikit-image's Umeyama (SVD) is the independent reference, on noisy and mirrored sets."""
    rng = np.random.default_rng(0)
    for i in range(500):
        src = rng.normal(0, 100, (5 + i % 64, 2))
        ang = rng.uniform(-np.pi, np.pi)
        rot = np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]])
        dst = src @ rot.T * rng.uniform(0.1, 4) + rng.normal(0, 80, 2)
        dst += rng.normal(0, 5 if i % 2 else 60, dst.shape)  # noisy: a real least squares
        if i % 5 == 0:
            dst[:, 0] *= -1  # a mirrored target: the best proper similarity, no reflection
        got = umeyama(src, dst)
        want = SimilarityTransform.from_estimate(src, dst).params
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-7 * (1 + np.abs(want).max()))
        assert np.linalg.det(got[:2, :2]) >= 0


def test_other_dimensions_recover_a_similarity() -> None:
    rng = np.random.default_rng(1)
    src = rng.normal(0, 1, (10, 3))
    q, _ = np.linalg.qr(rng.normal(0, 1, (3, 3)))
    rot = q * np.sign(np.linalg.det(q))  # a proper rotation
    dst = 2.5 * src @ rot.T + np.array([1.0, -2.0, 0.5])
    t = umeyama(src, dst)
    np.testing.assert_allclose(t[:3, :3], 2.5 * rot, atol=1e-9)
    np.testing.assert_allclose(t[:3, 3], [1.0, -2.0, 0.5], atol=1e-9)


def test_coincident_points_give_the_translation_only() -> None:
    src = np.ones((3, 2))
    dst = np.full((3, 2), 5.0)
    t = umeyama(src, dst)
    np.testing.assert_allclose(t[:2, :2], np.eye(2))
    np.testing.assert_allclose(t[:2, 2], [4.0, 4.0])
