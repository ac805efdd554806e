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


def test_a_specular_highlight_of_the_source_is_cut_and_a_coloured_one_is_not() -> None:
    """A spot brighter than the skin around it and paler (the light's colour: specular) is
    mostly taken out; an equally bright spot that keeps the skin's colour is left (issue 18:
    the source's highlights read as a silvery sheen under the target's light)."""
    from livefuse.swap.classic import _SPECULAR_CUT, masked_lowpass, soften_speculars

    skin = np.zeros((SIDE, SIDE, 3), np.float32)
    skin[:] = (120, 150, 200)
    spots = skin.copy()
    yy, xx = np.mgrid[:SIDE, :SIDE]
    white = ((yy - 50) ** 2 + (xx - 50) ** 2 < 12 ** 2)
    warm = ((yy - 110) ** 2 + (xx - 110) ** 2 < 12 ** 2)
    spots[white] = (215, 225, 235)  # near white: the lamp's colour
    spots[warm] = skin[0, 0] * 1.25  # brighter, the same hue and saturation
    lab = cv2.cvtColor(np.clip(spots, 0, 255).astype(np.uint8), cv2.COLOR_BGR2LAB)
    src = lab.astype(np.float32)
    before = src.copy()
    ones = np.ones((SIDE, SIDE), np.float32)
    weights = FaceWeights(source_skin=ones, source_features=np.zeros_like(ones), fade=ones,
                          target_skin=ones, target_colour=ones, target_face=ones)
    low = masked_lowpass(src, weights.source_skin, 0.08 * FACE_PX)
    spec = soften_speculars(src, low, weights, FACE_PX)
    centre_white, centre_warm = (50, 50), (110, 110)
    rise_before = before[centre_white][0] - low[centre_white][0]
    rise_after = src[centre_white][0] - low[centre_white][0]
    assert spec[centre_white] > 0.9
    assert rise_after <= (1 - 0.9 * _SPECULAR_CUT) * rise_before, (rise_before, rise_after)
    assert spec[centre_warm] < 0.1
    assert np.abs(src[centre_warm] - before[centre_warm]).max() < 1.5


def test_relight_pastes_no_white_highlight_of_the_source() -> None:
    """Through the whole renderer: the source's white highlight comes out at most a third as
    far above the skin around it as it was."""
    skin = np.zeros((SIDE, SIDE, 3), np.float32)
    skin[:] = (120, 150, 200)
    source = skin.copy()
    yy, xx = np.mgrid[:SIDE, :SIDE]
    source[(yy - 80) ** 2 + (xx - 80) ** 2 < 12 ** 2] = (215, 225, 235)
    ones = np.ones((SIDE, SIDE), np.float32)
    weights = FaceWeights(source_skin=ones, source_features=np.zeros_like(ones), fade=ones,
                          target_skin=ones, target_colour=ones, target_face=ones)
    out = relight(source.astype(np.uint8), skin.astype(np.uint8), weights, FACE_PX)
    lab_src = cv2.cvtColor(source.astype(np.uint8), cv2.COLOR_BGR2LAB).astype(np.float32)
    lab_out = cv2.cvtColor(out, cv2.COLOR_BGR2LAB).astype(np.float32)
    rise_src = lab_src[80, 80, 0] - lab_src[20, 140, 0]
    rise_out = lab_out[80, 80, 0] - lab_out[20, 140, 0]
    assert rise_out <= rise_src / 3, (rise_src, rise_out)
