"""RGBA and LA targets keep their straight-alpha colour (issue 15, item 3): every pixel outside
the swapped faces comes out byte-identical, alpha included. Before, the colour flattened onto
black for detection was written with the alpha kept: (234, 131, 91) at alpha 53 came out as
(48, 27, 18)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from livefuse.cli import main
from livefuse.faces.dlib_analyser import DlibFaceAnalyser
from livefuse.imaging import keep_straight_colour, load_image, swap_colour

ORANGE = (234, 131, 91)  # RGB, at alpha 53: the colour the issue saw darkened


def _target(t1_path: Path, mode: str, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """t1.jpg with an alpha that is opaque over the faces and 0..254 elsewhere, a band of
    semi-transparent orange, and colour hidden under fully transparent pixels; saved in ``mode``
    (RGBA or LA). Returns the faces' boxes and the file's pixels as RGBA."""
    rgb = np.asarray(Image.open(t1_path).convert("RGB")).copy()
    h, w = rgb.shape[:2]
    boxes = np.array([f.bbox for f in DlibFaceAnalyser().detect(rgb[..., ::-1].copy())])
    alpha = np.tile(np.linspace(0, 254, w).astype(np.uint8), (h, 1))
    for x0, y0, x1, y1 in boxes.astype(int):
        alpha[max(y0 - 60, 0):y1 + 60, max(x0 - 60, 0):x1 + 60] = 255
    rgb[:30] = ORANGE
    alpha[:30] = 53
    rgb[-20:] = (10, 200, 30)  # colour behind fully transparent pixels is kept too
    alpha[-20:] = 0
    if mode == "LA":
        grey = np.asarray(Image.fromarray(rgb).convert("L"))
        Image.fromarray(np.dstack([grey, alpha]), "LA").save(path)
    else:
        Image.fromarray(np.dstack([rgb, alpha]), "RGBA").save(path)
    return boxes, np.asarray(Image.open(path).convert("RGBA"))


@pytest.mark.parametrize(("mode", "suffix"), [("RGBA", ".png"), ("LA", ".png"),
                                              ("RGBA", ".tif")])
def test_pixels_outside_the_swapped_faces_are_byte_identical(
        t1_path: Path, astronaut_path: Path, tmp_path: Path, mode: str, suffix: str) -> None:
    target = tmp_path / f"target-{mode}.png"
    boxes, before = _target(t1_path, mode, target)
    out = tmp_path / f"out{suffix}"
    assert main(["run", "-q", "-s", str(astronaut_path), "-t", str(target), "-o", str(out),
                 "--engine", "classic"]) == 0
    after = np.asarray(Image.open(out).convert("RGBA"))
    assert after.shape == before.shape
    faces = np.zeros(before.shape[:2], bool)
    for x0, y0, x1, y1 in boxes.astype(int):  # the face and the feathered edge around it
        faces[max(y0 - 40, 0):y1 + 40, max(x0 - 40, 0):x1 + 40] = True
    np.testing.assert_array_equal(after[~faces], before[~faces])
    assert tuple(after[10, 10]) == (*ORANGE, 53) or mode == "LA"
    changed = (after != before).any(axis=2)
    assert changed[faces].mean() > 0.1  # the faces were swapped


def test_keep_straight_colour_puts_back_only_unchanged_pixels(tmp_path: Path) -> None:
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[...] = (*ORANGE, 53)
    rgba[0, 0] = (10, 20, 30, 255)
    rgba[3, 3] = (10, 200, 30, 0)  # colour kept under a fully transparent pixel
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    img = load_image(tmp_path / "a.png")
    assert tuple(img.bgr[1, 1]) == (18, 27, 48)  # flattened onto black for display
    work = swap_colour(img)
    assert tuple(work[1, 1]) == ORANGE[::-1] and tuple(work[3, 3]) == (0, 0, 0)
    swapped = work.copy()
    swapped[0, 0] = (1, 2, 3)  # a "swapped" pixel
    out = keep_straight_colour(swapped, img, work)
    assert tuple(out[0, 0]) == (1, 2, 3) and tuple(out[1, 1]) == ORANGE[::-1]
    assert tuple(out[3, 3]) == (30, 200, 10)
    no_alpha = load_image(tmp_path / "a.png")
    assert keep_straight_colour(swapped, type(no_alpha)(swapped, None, no_alpha.path)) is swapped


def test_a_semi_transparent_face_is_swapped_in_its_own_colour(
        t1_path: Path, astronaut_path: Path, tmp_path: Path) -> None:
    """A face under alpha 128 or 24 is found and swapped in the file's straight colour: with
    one alpha over the whole picture the stored colour is the opaque swap's, byte for byte.
    Swapping the picture flattened onto black wrote faces at half brightness (166 -> 81), and
    dividing by the alpha afterwards pinned a face at alpha 24 to 0 and 255."""
    rgb = np.asarray(Image.open(t1_path).convert("RGB"))
    opaque = tmp_path / "opaque-out.png"
    assert main(["run", "-q", "-s", str(astronaut_path), "-t", str(t1_path), "-o",
                 str(opaque), "--engine", "classic"]) == 0
    want = np.asarray(Image.open(opaque).convert("RGB"))
    for a in (128, 24):
        target, out = tmp_path / f"a{a}.png", tmp_path / f"a{a}-out.png"
        Image.fromarray(np.dstack([rgb, np.full(rgb.shape[:2], a, np.uint8)]), "RGBA").save(target)
        assert main(["run", "-q", "-s", str(astronaut_path), "-t", str(target), "-o",
                     str(out), "--engine", "classic"]) == 0
        got = np.asarray(Image.open(out).convert("RGBA"))
        assert (got[..., 3] == a).all()
        np.testing.assert_array_equal(got[..., :3], want)


def test_a_transparent_target_written_as_jpeg_says_its_transparency_is_lost(
        t1_path: Path, astronaut_path: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "target.png"
    _target(t1_path, "RGBA", target)
    assert main(["run", "-q", "-s", str(astronaut_path), "-t", str(target), "-o",
                 str(tmp_path / "out.jpg"), "--engine", "classic"]) == 0
    assert "transparency cannot be kept in .jpg: it is flattened onto black" in \
        capsys.readouterr().out
