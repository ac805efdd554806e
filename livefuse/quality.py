"""The quality gate: how much a speed or quality option changes the swapped face, in numbers.

``livefuse bench --quality`` runs two engines in lockstep on the same frames, a reference and a
variant (fp16 vs fp32, cache vs no cache, enhancer or masks on vs off), and reports PSNR and SSIM
of the variant's output against the reference's, on the face region only (the union of the
reference's face boxes: the rest of the frame is the input in both), per frame min and mean.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from livefuse.engine import Engine
from livefuse.imaging import LoadedImage
from livefuse.types import Face, Frame


@dataclass(frozen=True)
class QualityRow:
    """One variant against its reference.

    Attributes:
        name: what is compared, e.g. ``fp16 vs fp32``.
        frames: frames compared (frames where the reference swapped a face).
        psnr_mean, psnr_min: dB on the face region (``inf`` when identical).
        ssim_mean, ssim_min: SSIM on the face region (1 = identical).
        note: why a row was not measured, or what it ran on.
    """

    name: str
    frames: int = 0
    psnr_mean: float = math.nan
    psnr_min: float = math.nan
    ssim_mean: float = math.nan
    ssim_min: float = math.nan
    note: str = ""

    def line(self) -> str:
        if not self.frames:
            return f"{self.name:<28} {'-':>6} {'-':>9} {'-':>9} {'-':>8} {'-':>8}  {self.note}"
        return (f"{self.name:<28} {self.frames:>6} {self.psnr_mean:>9.2f} {self.psnr_min:>9.2f} "
                f"{self.ssim_mean:>8.4f} {self.ssim_min:>8.4f}  {self.note}")


HEADER = (f"{'variant vs reference':<28} {'frames':>6} {'PSNR mean':>9} {'PSNR min':>9} "
          f"{'SSIM mean':>8} {'SSIM min':>8}")


def face_region(faces: Sequence[Face], shape: tuple[int, ...]) -> tuple[slice, slice] | None:
    """The union of the faces' boxes, clipped to the frame, or ``None`` without faces."""
    if not faces:
        return None
    h, w = shape[:2]
    boxes = np.array([f.bbox for f in faces], np.float64)
    x0, y0 = max(int(boxes[:, 0].min()), 0), max(int(boxes[:, 1].min()), 0)
    x1, y1 = min(int(np.ceil(boxes[:, 2].max())), w), min(int(np.ceil(boxes[:, 3].max())), h)
    if x1 - x0 < 8 or y1 - y0 < 8:
        return None
    return slice(y0, y1), slice(x0, x1)


def psnr_ssim(reference: Frame, output: Frame) -> tuple[float, float]:
    """PSNR (dB, ``inf`` when equal) and SSIM of two ``(h, w, 3) uint8`` regions."""
    if np.array_equal(reference, output):
        return math.inf, 1.0
    psnr = float(peak_signal_noise_ratio(reference, output, data_range=255))
    ssim = float(structural_similarity(reference, output, channel_axis=2, data_range=255))
    return psnr, ssim


def compare(name: str, frames: Sequence[Frame], source: LoadedImage,
            make_reference: Callable[[], Engine], make_variant: Callable[[], Engine],
            period_ns: int = 33_333_333, note: str = "") -> QualityRow:
    """Run a reference and a variant engine in lockstep on ``frames`` and measure the variant.

    Args:
        make_reference, make_variant: build an :class:`~livefuse.engine.Engine` each.
        period_ns: the frames' spacing in time (the landmark filter's clock).
    """
    ref, var = make_reference(), make_variant()
    ref.set_source(source)
    var.set_source(source)
    psnrs, ssims = [], []
    for i, frame in enumerate(frames):
        a = ref.process(frame, i, t_capture_ns=i * period_ns)
        b = var.process(frame, i, t_capture_ns=i * period_ns)
        region = face_region(a.faces, frame.shape) if a.swapped else None
        if region is None or a.output is None or b.output is None:
            continue
        p, s = psnr_ssim(a.output[region], b.output[region])
        psnrs.append(p)
        ssims.append(s)
    if not psnrs:
        return QualityRow(name, note=note or "no face swapped by the reference")
    finite = [p for p in psnrs if math.isfinite(p)]
    return QualityRow(name, len(psnrs),
                      psnr_mean=float(np.mean(finite)) if finite else math.inf,
                      psnr_min=float(min(psnrs)), ssim_mean=float(np.mean(ssims)),
                      ssim_min=float(min(ssims)), note=note)


__all__ = ["HEADER", "QualityRow", "compare", "face_region", "psnr_ssim"]
