"""The one image loader and the one image writer used by every entry point.

``load_image`` turns any still image Pillow can decode into ``(H, W, 3) uint8 BGR``:
EXIF orientation applied, alpha split off (and kept so a target's transparency survives),
grayscale / palette / 16-bit / CMYK normalised. A missing, empty, truncated or non-image file
raises :class:`~livefuse.errors.ImageLoadError` naming the path; a ``None`` image never travels.
"""

from __future__ import annotations

import io
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
from PIL import Image, ImageCms, ImageFile, ImageOps, UnidentifiedImageError

from livefuse.errors import ImageLoadError
from livefuse.names import IMAGE_PART_TAIL, temp_prefix
from livefuse.types import Frame

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"})
ALPHA_SUFFIXES = frozenset({".png", ".webp", ".tif", ".tiff"})
"""Output formats that keep an alpha channel (:func:`save_image` writes it there)."""
MAX_PIXELS = 16384 * 16384
"""The largest picture livefuse reads (268 megapixels; phone sensors reach 200): about 800 MB
decoded. A larger one is refused from its header. Pillow's decompression-bomb guard warns from
89 megapixels and refuses from twice that with its own error (a new user's trial: a traceback
for 256 megapixels, a warning printed twice for 100): it is moved up to this limit, where
livefuse's own refusal comes first."""
if Image.MAX_IMAGE_PIXELS is not None and Image.MAX_IMAGE_PIXELS < MAX_PIXELS:
    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)  # refused below


@dataclass(frozen=True)
class LoadedImage:
    """A decoded image.

    Attributes:
        bgr: ``(H, W, 3) uint8 BGR``; transparent pixels are flattened onto black (what the
            detector and the swap see).
        alpha: ``(H, W) uint8`` alpha channel, or ``None`` when the file had none.
        path: where it came from.
        straight: with ``alpha``, the file's own colour ``(H, W, 3) uint8 BGR`` (straight, not
            multiplied by alpha; grey repeated for LA), which an output with alpha keeps
            outside the swapped faces (:func:`keep_straight_colour`); else ``None``.
    """

    bgr: Frame
    alpha: npt.NDArray[np.uint8] | None
    path: Path
    straight: Frame | None = None
    notes: tuple[str, ...] = ()
    """What the 8-bit colour picture leaves out of the file (16-bit samples, a grey picture):
    an output is written from the picture, so `run` says it."""


def _to_uint8(arr: npt.NDArray[np.generic]) -> npt.NDArray[np.uint8]:
    """Scale 16-bit / 32-bit integer or float samples to 0..255."""
    if arr.dtype == np.uint8:
        return arr  # type: ignore[return-value]
    a = arr.astype(np.float64)
    if np.issubdtype(arr.dtype, np.floating):
        top = 1.0 if a.size and float(np.nanmax(a)) <= 1.0 else 255.0
    elif a.size and float(a.max()) > 255.0:
        top = 65535.0
    else:
        top = 255.0
    return np.clip(np.nan_to_num(a) * (255.0 / top) + 0.5, 0, 255).astype(np.uint8)


def _decode(im: Image.Image) -> tuple[Frame, npt.NDArray[np.uint8] | None, Frame | None]:
    mode = im.mode
    if mode == "P" or mode == "PA":
        im = im.convert("RGBA" if ("transparency" in im.info or mode == "PA") else "RGB")
    elif mode == "CMYK" or mode == "YCbCr":
        im = im.convert("RGB")
    elif mode == "1":
        im = im.convert("L")
    mode = im.mode
    alpha: npt.NDArray[np.uint8] | None = None
    straight: Frame | None = None
    if mode in ("RGBA", "LA", "RGBa", "La"):
        if mode in ("RGBa", "La"):
            im = im.convert(mode.upper())
        arr = np.asarray(im)
        alpha = np.ascontiguousarray(arr[..., -1])
        color = arr[..., :-1]
        if color.shape[-1] == 1:
            color = np.repeat(color, 3, axis=-1)
        straight = np.ascontiguousarray(_to_uint8(color)[..., ::-1])
        # Flatten onto black so detection never sees garbage behind transparent pixels.
        color = flatten_onto_black(color, alpha)
        rgb = color
    elif mode == "RGB":
        rgb = np.asarray(im)
    else:  # L, I, I;16*, F: single channel, any depth
        gray = _to_uint8(np.asarray(im))
        rgb = np.repeat(gray[..., None], 3, axis=-1)
    rgb = _to_uint8(rgb)
    bgr = np.ascontiguousarray(rgb[..., ::-1])
    return bgr, alpha, straight


def load_image(path: str | os.PathLike[str], role: str | None = None) -> LoadedImage:
    """Load an image file as BGR uint8 with EXIF orientation applied.

    Args:
        path: any path, Unicode included.
        role: what the image is to the command (``source``, ``reference``), named in the
            error so that a user with several inputs knows which one it is.

    Returns:
        :class:`LoadedImage` with ``bgr`` ``(H, W, 3) uint8`` and optional ``alpha`` ``(H, W)``.

    Raises:
        ImageLoadError: the file is missing, empty, truncated, not an image, or has no pixels.
    """
    p = _existing_file(Path(path), role)
    try:
        with Image.open(p) as im:
            _check_header(im, p, role)
            notes = _depth_notes(im)  # before load(), which drops the raw layout it reads
            im.load()  # decodes now so a truncated file fails here, not later
            upright = ImageOps.exif_transpose(im) or im
            upright, profile = _to_srgb(upright, im.info.get("icc_profile"))
            notes += profile
            bgr, alpha, straight = _decode(upright)
    except UnidentifiedImageError as exc:
        raise ImageLoadError(p, "not a recognised image format", role) from exc
    except Image.DecompressionBombError as exc:
        raise ImageLoadError(p, _TOO_LARGE, role) from exc
    except (OSError, SyntaxError, ValueError) as exc:
        msg = str(exc)
        if "truncated" in msg.lower():
            msg = "file is truncated (incomplete download or copy?)"
        raise ImageLoadError(p, f"cannot decode: {msg}", role) from exc
    if bgr.ndim != 3 or bgr.shape[0] == 0 or bgr.shape[1] == 0:
        raise ImageLoadError(p, f"decoded to an empty image of shape {bgr.shape}",
                             role)
    return LoadedImage(bgr=bgr, alpha=alpha, path=p, straight=straight, notes=notes)


_TOO_LARGE = (f"larger than {MAX_PIXELS // 1_000_000} megapixels, the most livefuse reads "
              "(or a damaged header that claims so): scale it down")


def _check_header(im: Image.Image, p: Path, role: str | None) -> None:
    """A picture past :data:`MAX_PIXELS` is refused, from its header; so is an animated WebP or
    a multi-page TIFF: its first frame alone came out, as a still, with no word (a new user's
    trial)."""
    if im.width * im.height > MAX_PIXELS:
        raise ImageLoadError(p, _TOO_LARGE, role)
    # a JPEG with a second picture in its MPF data (an iPhone's HDR gain map, a camera's
    # large preview) opens as MPO with n_frames 2: its first picture is the photo
    frames = 1 if im.format == "MPO" else int(getattr(im, "n_frames", 1) or 1)
    if frames > 1:
        raise ImageLoadError(p, f"holds {frames} frames (an animation or a multi-page file); "
                                "livefuse takes still images and videos: convert it to a video "
                                "(ffmpeg -i IN OUT.mp4), or save the one frame you want", role)


_SRGB = ImageCms.createProfile("sRGB")


def _to_srgb(im: Image.Image, icc: bytes | None) -> tuple[Image.Image, tuple[str, ...]]:
    """``im`` converted to sRGB from its embedded colour profile, with a note, when that profile
    is another one (a phone's Display P3, Adobe RGB); as it is otherwise. Everything after
    works in sRGB, and outputs are written without a profile, which viewers read as sRGB (a new
    user's trial: profiles were dropped, so a wide-gamut photo's colours came out duller)."""
    if not icc or im.mode not in ("RGB", "RGBA", "CMYK"):
        return im, ()
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        name = ImageCms.getProfileDescription(profile).strip() or "unnamed"
        if "srgb" in name.lower().replace(" ", ""):
            return im, ()
        converted = ImageCms.profileToProfile(im, profile, _SRGB,
                                              outputMode="RGBA" if im.mode == "RGBA" else "RGB")
    except (OSError, ValueError, ImageCms.PyCMSError):
        return im, ("the picture's colour profile could not be read and was left out (its "
                    "colours are taken as sRGB)",)
    assert converted is not None  # profileToProfile returns None only with inPlace
    return converted, (f"the picture's colours were converted from its profile '{name}' to "
                       "sRGB (the output is sRGB)",)


def _depth_notes(im: Image.Image) -> tuple[str, ...]:
    """Notes for a file that the 8-bit colour picture does not hold as it is (a new user's
    16-bit PNG came out 8-bit, and a grey one in colour, unsaid)."""
    notes = []
    # Pillow reads a 48-bit PNG as 8-bit RGB: only its raw layout ("RGB;16B") tells
    tiles = im.tile if isinstance(im, ImageFile.ImageFile) else []
    raw16 = any(";16" in str(tile[3]) for tile in tiles or ())
    if im.mode.startswith("I") or im.mode == "F" or raw16:
        notes.append("the target has more than 8 bits per sample; the output has 8")
    if im.mode in ("L", "LA", "La", "1", "F") or im.mode.startswith("I"):
        # the file, not the picture: grey stays grey (a trial read "in colour" as colourised)
        notes.append("the target is a one-channel grey file; the output is stored as RGB, "
                     "its pixels still grey")
    return tuple(notes)


def check_image(path: str | os.PathLike[str], role: str | None = None) -> None:
    """Read only an image file's header: a missing, empty or non-image file is refused in
    milliseconds, before anything slow (a command builds its engine after this). A file whose
    pixels are damaged past the header passes; :func:`load_image` refuses it.

    Raises:
        ImageLoadError: as :func:`load_image`, for what the header shows.
    """
    p = _existing_file(Path(path), role)
    try:
        with Image.open(p) as im:
            _check_header(im, p, role)
    except UnidentifiedImageError as exc:
        raise ImageLoadError(p, "not a recognised image format", role) from exc
    except Image.DecompressionBombError as exc:
        raise ImageLoadError(p, _TOO_LARGE, role) from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageLoadError(p, f"cannot decode: {exc}", role) from exc


def _existing_file(p: Path, role: str | None) -> Path:
    if not p.exists():
        raise ImageLoadError(p, "file not found", role)
    if p.is_dir():
        raise ImageLoadError(p, "is a folder, not an image file", role)
    if not p.is_file():  # a FIFO read as "empty (0 bytes)" (a new user's trial)
        raise ImageLoadError(p, "is not a regular file (a pipe, a device or a socket)", role)
    if p.stat().st_size == 0:
        raise ImageLoadError(p, "file is empty (0 bytes)", role)
    if not os.access(p, os.R_OK):  # not "cannot decode: [Errno 13]"
        raise ImageLoadError(p, "permission denied (this user may not read it)", role)
    return p


def swap_colour(image: LoadedImage) -> Frame:
    """The picture a swap works on, ``(H, W, 3) uint8 BGR``: the file's own straight colour
    wherever any of it shows (alpha > 0), black under fully transparent pixels (a colour a file
    keeps there is never seen by the detector); ``image.bgr`` for an image without alpha.

    A face under partial transparency is then found and swapped in its real colours: swapping
    the picture flattened onto black and dividing by the alpha afterwards pinned a face at
    alpha 24 to 0 and 255 (the swap's detail, divided by 0.09)."""
    if image.straight is None or image.alpha is None:
        return image.bgr
    return np.where(image.alpha[..., None] > 0, image.straight, 0).astype(np.uint8)


def keep_straight_colour(output: Frame, image: LoadedImage,
                         worked_on: Frame | None = None) -> Frame:
    """``output`` (a frame made from ``worked_on``, by default :func:`swap_colour` of ``image``,
    e.g. the swapped target) with the file's straight colour put back wherever ``output`` left
    ``worked_on`` unchanged: written with ``image.alpha`` beside it, every pixel outside the
    swapped faces comes out as in the file, the colour under fully transparent pixels included
    (a semi-transparent (234, 131, 91) at alpha 53 stays that, not the flattened (48, 27, 18)).
    ``output`` itself when the image has no alpha."""
    if image.straight is None:
        return output
    base = swap_colour(image) if worked_on is None else worked_on
    changed = (output != base).any(axis=2)
    return np.where(changed[..., None], output, image.straight).astype(np.uint8)


def flatten_onto_black(bgr: Frame, alpha: npt.NDArray[np.uint8]) -> Frame:
    """``bgr`` composited onto black by ``alpha`` (what a format without alpha shows)."""
    return (bgr.astype(np.uint16) * alpha[..., None] // 255).astype(np.uint8)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a temp file beside ``path`` and rename it over ``path``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path, IMAGE_PART_TAIL), suffix=".part",
                                   dir=path.parent)
    except OSError as exc:  # named by the output, not by a temp name the user never gave
        raise OSError(exc.errno, f"cannot write there ({exc.strerror or exc})",
                      str(path)) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        # mkstemp creates 0600; a finished output gets the mode any new file would get.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None or str(exc.filename) == tmp:  # a full disk: the output named
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_image(path: str | os.PathLike[str], bgr: Frame,
               alpha: npt.NDArray[np.uint8] | None = None) -> Path:
    """Encode and atomically write an image; the format follows the suffix.

    ``alpha`` ``(H, W) uint8`` is written as a fourth channel where the format keeps it
    (PNG, WebP, TIFF) and dropped otherwise.

    Raises:
        ImageLoadError: the suffix is not an image format OpenCV can write.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in IMAGE_SUFFIXES:
        raise ImageLoadError(p, f"unsupported output image suffix '{suffix}'")
    img: npt.NDArray[np.uint8] = bgr
    if alpha is not None and suffix in ALPHA_SUFFIXES:
        img = np.dstack([bgr, alpha])
    ok, buf = cv2.imencode(suffix, img)
    if not ok:
        raise ImageLoadError(p, "OpenCV could not encode the output image")
    atomic_write_bytes(p, buf.tobytes())
    return p


def is_image_path(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() in IMAGE_SUFFIXES
