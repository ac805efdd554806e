"""The one image loader: every bad input kind gives the right image or a clear error."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from livefuse.errors import ImageLoadError
from livefuse.imaging import load_image, save_image


def _gradient(h: int = 40, w: int = 60) -> np.ndarray:
    """RGB image whose every pixel is distinct enough to detect a rotation or flip."""
    y, x = np.mgrid[0:h, 0:w]
    return np.dstack([x * 4, y * 6, (x + y) * 2]).astype(np.uint8)


def test_unicode_path(tmp_path: Path) -> None:
    p = tmp_path / "фото 顔 é.png"
    Image.fromarray(_gradient()).save(p)
    img = load_image(p)
    assert img.bgr.shape == (40, 60, 3)
    assert img.bgr.dtype == np.uint8
    np.testing.assert_array_equal(img.bgr[..., ::-1], _gradient())
    assert img.alpha is None


# EXIF orientation -> the numpy op that undoes it (EXIF 2.3 spec, tag 0x0112).
_ORIENT = {
    3: lambda a: np.rot90(a, 2),
    6: lambda a: np.rot90(a, -1),  # stored rotated 90 CCW, displayed after a CW turn
    8: lambda a: np.rot90(a, 1),
}


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_orientation_applied(tmp_path: Path, orientation: int) -> None:
    raw = _gradient()
    p = tmp_path / f"o{orientation}.jpg"
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(raw).save(p, quality=100, exif=exif)
    stored = np.asarray(Image.open(p).convert("RGB")).astype(int)  # pixels as stored
    img = load_image(p)
    expected = _ORIENT[orientation](stored)
    assert img.bgr.shape[:2] == expected.shape[:2]
    assert np.abs(img.bgr[..., ::-1].astype(int) - expected).mean() < 1.0
    if orientation in (6, 8):
        assert img.bgr.shape[:2] == (60, 40)


def test_rgba_png_flattened_and_alpha_kept(tmp_path: Path) -> None:
    rgba = np.dstack([_gradient(), np.full((40, 60), 255, np.uint8)])
    rgba[:, :30, 3] = 0  # left half transparent
    rgba[:, :30, :3] = 200
    p = tmp_path / "a.png"
    Image.fromarray(rgba, "RGBA").save(p)
    img = load_image(p)
    assert img.alpha is not None
    np.testing.assert_array_equal(img.alpha, rgba[..., 3])
    assert img.bgr[:, :30].max() == 0  # flattened onto black, not the hidden colour
    np.testing.assert_array_equal(img.bgr[:, 30:, ::-1], rgba[:, 30:, :3])


def test_palette_png_with_transparency(tmp_path: Path) -> None:
    im = Image.fromarray(_gradient()).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    im.info["transparency"] = 0
    p = tmp_path / "p.png"
    im.save(p, transparency=0)
    img = load_image(p)
    assert img.bgr.shape == (40, 60, 3)
    assert img.alpha is not None and (img.alpha == 0).any() and (img.alpha == 255).any()


def test_grayscale_png(tmp_path: Path) -> None:
    g = _gradient()[..., 0]
    p = tmp_path / "g.png"
    Image.fromarray(g, "L").save(p)
    img = load_image(p)
    assert img.bgr.shape == (40, 60, 3)
    for c in range(3):
        np.testing.assert_array_equal(img.bgr[..., c], g)


def test_16bit_png_normalised(tmp_path: Path) -> None:
    g16 = (np.arange(40 * 60, dtype=np.uint32).reshape(40, 60) * 27).astype(np.uint16)
    p = tmp_path / "g16.png"
    Image.fromarray(g16).save(p)
    assert Image.open(p).mode.startswith("I")
    img = load_image(p)
    assert img.bgr.dtype == np.uint8
    expected = np.round(g16 / 65535.0 * 255.0)
    assert np.abs(img.bgr[..., 1].astype(float) - expected).max() <= 1.0


def test_zero_byte_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.jpg"
    p.write_bytes(b"")
    with pytest.raises(ImageLoadError, match=r"empty.jpg.*empty \(0 bytes\)"):
        load_image(p)


def test_truncated_jpeg(tmp_path: Path) -> None:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (200, 200, 3), np.uint8)).save(
        buf, "JPEG", quality=95)
    p = tmp_path / "cut.jpg"
    p.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(ImageLoadError, match=r"cut.jpg.*truncated"):
        load_image(p)


def test_not_an_image(tmp_path: Path) -> None:
    p = tmp_path / "page.png"
    p.write_text("<html>404 not found</html>")
    with pytest.raises(ImageLoadError, match=r"page.png.*not a recognised image"):
        load_image(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ImageLoadError, match=r"nope.jpg.*not found"):
        load_image(tmp_path / "nope.jpg")


def test_save_is_atomic_and_keeps_alpha(tmp_path: Path) -> None:
    bgr = _gradient()[..., ::-1].copy()
    alpha = np.full((40, 60), 128, np.uint8)
    out = save_image(tmp_path / "o.png", bgr, alpha)
    assert [f.name for f in tmp_path.iterdir()] == ["o.png"]  # no temp file left behind
    back = load_image(out)
    np.testing.assert_array_equal(back.alpha, alpha)


@pytest.mark.parametrize("name", ["anim.webp", "pages.tif"])
def test_an_animation_or_a_multi_page_file_is_refused(tmp_path: Path, name: str) -> None:
    """A new user's trial: an animated WebP and a two-page TIFF came out as a one-frame still,
    exit 0, with no word."""
    from livefuse.imaging import check_image

    frames = [Image.fromarray(np.full((32, 32, 3), 60 * i, np.uint8)) for i in range(3)]
    path = tmp_path / name
    frames[0].save(path, save_all=True, append_images=frames[1:])
    for read in (load_image, check_image):
        with pytest.raises(ImageLoadError, match=rf"{name}': holds 3 frames"):
            read(path)
    frames[0].save(tmp_path / "one.webp")
    assert load_image(tmp_path / "one.webp").bgr.shape == (32, 32, 3)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # as livefuse.imaging
def test_a_picture_past_the_size_livefuse_reads_is_one_clear_error(tmp_path: Path) -> None:
    """A new user's trial: a 256-megapixel PNG (269 KB of zeros) gave Pillow's
    DecompressionBombError as a traceback, and 100 megapixels printed its warning twice."""
    import struct
    import warnings
    import zlib

    from livefuse.imaging import MAX_PIXELS, check_image

    def png(w: int, h: int) -> bytes:
        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + \
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(b"\x00" * (w + 1))) + chunk(b"IEND", b""))

    big = tmp_path / "big.png"
    big.write_bytes(png(20000, 20000))
    assert MAX_PIXELS < 20000 * 20000
    for read in (load_image, check_image):
        with pytest.raises(ImageLoadError, match=r"big\.png': larger than 268 megapixels"):
            read(big, "source")
    large = tmp_path / "large.png"  # 150 megapixels: read (the header alone), no warning
    large.write_bytes(png(12300, 12300))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_image(large)


def test_a_wide_gamut_photo_is_read_in_srgb(tmp_path: Path) -> None:
    """A new user's trial: embedded colour profiles were dropped, so a Display P3 photo (a
    phone's) was taken as sRGB and came out duller. It is converted to sRGB when read, with a
    note; an sRGB-tagged photo is read as it is."""
    from PIL import ImageCms

    from livefuse.testing.icc import matrix_profile

    pixels = np.zeros((8, 8, 3), np.uint8)
    pixels[...] = (200, 50, 50)  # RGB
    p3 = tmp_path / "p3.png"
    Image.fromarray(pixels).save(p3, icc_profile=matrix_profile("Test Display P3"))
    got = load_image(p3)
    red = got.bgr[0, 0, ::-1].astype(int)
    assert red[0] > 210 and red[1] < 30 and red[2] < 45, red  # P3's red is redder than sRGB's
    assert any("profile 'Test Display P3' to sRGB" in n for n in got.notes), got.notes
    rgba = tmp_path / "p3a.png"
    Image.fromarray(np.dstack([pixels, np.full((8, 8), 128, np.uint8)])).save(
        rgba, icc_profile=matrix_profile("Test Display P3"))
    both = load_image(rgba)
    assert both.alpha is not None and int(both.alpha[0, 0]) == 128
    assert both.straight is not None and np.array_equal(both.straight[0, 0], got.bgr[0, 0])
    srgb = tmp_path / "srgb.png"
    Image.fromarray(pixels).save(srgb, icc_profile=ImageCms.ImageCmsProfile(
        ImageCms.createProfile("sRGB")).tobytes())
    plain = load_image(srgb)
    assert tuple(plain.bgr[0, 0]) == (50, 50, 200) and plain.notes == ()


def test_a_pipe_is_named_as_such(tmp_path: Path) -> None:
    """A new user's trial: a FIFO given as a photo was called "empty (0 bytes)"."""
    import os

    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    with pytest.raises(ImageLoadError, match="is not a regular file"):
        load_image(fifo)


def test_a_jpeg_with_a_second_picture_is_a_photo(tmp_path: Path) -> None:
    """A review: an iPhone's HDR JPEG (a gain map) or a camera's JPEG with a large preview
    holds a second picture in its MPF data; Pillow opens it as MPO with two frames, and the
    refusal of animations refused everyday photos. Its first picture is the photo."""
    main = Image.fromarray(np.full((16, 24, 3), 200, np.uint8))
    path = tmp_path / "phone.jpg"
    main.save(path, format="MPO", save_all=True,
              append_images=[Image.fromarray(np.zeros((8, 12, 3), np.uint8))])
    with Image.open(path) as im:
        assert im.format == "MPO" and getattr(im, "n_frames", 1) == 2
    assert load_image(path).bgr.shape == (16, 24, 3)
