"""The classic renderer brings the source's fine skin relief to the target's contrast (issue 18:
a sharp, hard-lit source on a soft target read as a mottled, silvery sheen) and leaves the
source's features their full detail."""

from __future__ import annotations

import cv2
import numpy as np

from livefuse.swap.classic import _RELIEF_MIN_GAIN, FaceWeights, relight

SIDE, FACE_PX = 160, 120.0


def _fine(bgr: np.ndarray) -> np.ndarray:
    lab = cv2.cvtColor(bgr, cv2.COLOR_BGR2LAB)[..., 0].astype(np.float32)
    return lab - cv2.GaussianBlur(lab, (0, 0), FACE_PX / 60)


def test_a_textured_source_on_a_smooth_target_takes_the_targets_relief() -> None:
    rng = np.random.default_rng(0)
    skin = np.zeros((SIDE, SIDE, 3), np.float32)
    skin[:] = (120, 150, 200)  # a warm skin tone, BGR
    noise = cv2.GaussianBlur(rng.normal(0, 25, (SIDE, SIDE)).astype(np.float32), (0, 0), 0.8)
    source = np.clip(skin + noise[..., None], 0, 255).astype(np.uint8)
    target = skin.astype(np.uint8)  # soft: no fine relief at all
    features = np.zeros((SIDE, SIDE), np.float32)
    features[20:60, 20:60] = 1.0  # an "eye": keeps the source's detail
    ones = np.ones((SIDE, SIDE), np.float32)
    weights = FaceWeights(source_skin=ones - features, source_features=features, fade=ones,
                          target_skin=ones - features, target_colour=ones, target_face=ones)
    out = relight(source, target, weights, FACE_PX)
    inner = (slice(70, 150), slice(70, 150))  # skin, away from the feature's edge
    src_spread, out_spread = _fine(source)[inner].std(), _fine(out)[inner].std()
    assert src_spread > 4.0
    # cut to the least gain (the target has none), plus 8-bit rounding
    assert out_spread <= _RELIEF_MIN_GAIN * src_spread + 0.6, (src_spread, out_spread)
    eye = (slice(28, 52), slice(28, 52))
    assert _fine(out)[eye].std() >= 0.8 * _fine(source)[eye].std()
