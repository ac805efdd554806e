"""Which video encoder and decoder this machine really has, chosen by opening them.

PyAV's wheel lists NVIDIA's NVENC encoders and NVDEC (``cuda``) decoding on every machine, with or
without a GPU that has them (an H200 has NVDEC but no NVENC; a consumer RTX card has both). A name
in a list therefore says nothing: an encoder is chosen by opening it (:func:`probe_encoder`),
and NVDEC by creating its CUDA device for the input (:func:`open_video`), with a fallback to the
CPU that the run's summary names.

Everything here is for files (``livefuse run``, ``livefuse batch``); the live recorder keeps its
own libx264 settings.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av

from livefuse.config import MAX_CRF, VIDEO_DECODER_CHOICES, VIDEO_ENCODER_CHOICES
from livefuse.errors import LivefuseError, VideoError

DEFAULT_CRF = 18  # x264's "visually lossless" range (17-18) per the x264 / FFmpeg H.264 guide
NVENC_ENCODERS = ("h264_nvenc", "hevc_nvenc", "av1_nvenc")
AUTO_ENCODERS = ("h264_nvenc", "libx264")
"""What ``--video-encoder auto`` tries, in order: NVENC where it opens, else x264."""


def plain_av_error(exc: BaseException) -> str:
    """An FFmpeg error as a sentence, without the raw errno (``[Errno 1094995529] Invalid
    data...`` says nothing to a user)."""
    if isinstance(exc, av.error.InvalidDataError):
        return ("no readable video data: the file is damaged or incomplete (a recording cut off "
                "before it was finished has no index), or it is not a video")
    if isinstance(exc, av.error.FileNotFoundError):
        return "file not found"
    if isinstance(exc, av.error.PermissionError):
        return "permission denied"
    if isinstance(exc, av.error.IsADirectoryError):
        return "is a folder, not a video file"
    if isinstance(exc, av.error.FFmpegError):
        what = exc.strerror or type(exc).__name__
        return what[0].lower() + what[1:] if what else "FFmpeg error"
    return str(exc)


@dataclass(frozen=True)
class EncoderChoice:
    """An encoder that opened, with the options livefuse gives it.

    Attributes:
        name: FFmpeg's encoder name (``libx264``, ``h264_nvenc``...).
        options: private options (``crf``, ``preset``... or NVENC's ``cq``).
        frame_threads: encode with frame threads (x264/x265: several frames at once, the
            throughput setting; the output is deterministic on one machine either way).
        note: why this one (``auto``), for the run's summary.
    """

    name: str
    options: dict[str, str]
    frame_threads: bool = True
    note: str = ""

    @property
    def hardware(self) -> bool:
        return "nvenc" in self.name


def _on_scale(crf: int, offset: int) -> str:
    """x264's CRF ``crf`` (0..51) on another encoder's 0..51 quality scale that runs ``offset``
    above it, as FFmpeg's float option text: ``crf + offset`` up to x264's default
    (:data:`DEFAULT_CRF`), then straight on to 51 at 51. The offset clipped at 51 gave several
    CRFs the same output (an option trial: ``--crf 46`` to ``51`` with libx265)."""
    if crf <= DEFAULT_CRF:
        return str(crf + offset)
    top = DEFAULT_CRF + offset
    value = top + (MAX_CRF - top) * (crf - DEFAULT_CRF) / (MAX_CRF - DEFAULT_CRF)
    return f"{value:.2f}".rstrip("0").rstrip(".")


def encoder_options(name: str, crf: int = DEFAULT_CRF) -> dict[str, str]:
    """Quality settings per encoder, all aimed at x264's CRF ``crf`` (:func:`_on_scale`).

    x265's CRF runs about 5 above x264's for the same look (the FFmpeg H.265 guide: its default
    28 "should visually correspond to libx264 video at CRF 23"); NVENC's constant-quality ``cq``
    on its VBR mode is used one above x264's CRF (its 0 means "automatic"). Both take
    fractional values.
    """
    if name == "libx264":
        return {"crf": str(crf), "preset": "veryfast"}
    if name == "libx265":
        return {"crf": _on_scale(crf, 5), "preset": "veryfast",
                "x265-params": "log-level=error"}
    if name in NVENC_ENCODERS:
        return {"preset": "p4", "rc": "vbr", "cq": _on_scale(crf, 1), "b": "0"}
    return {}


@functools.lru_cache(maxsize=32)
def probe_encoder(name: str, width: int = 256, height: int = 256) -> str | None:
    """Open ``name`` for a ``width x height`` yuv420p stream and close it again.

    Returns:
        ``None`` when it opens; else why not, as a sentence.
    """
    try:
        ctx: Any = av.codec.CodecContext.create(name, "w")
    except (av.error.FFmpegError, ValueError) as exc:
        return f"not in this FFmpeg build ({plain_av_error(exc)})"
    ctx.width, ctx.height, ctx.pix_fmt = width, height, "yuv420p"
    ctx.time_base = Fraction(1, 30)
    ctx.framerate = Fraction(30)
    ctx.options = encoder_options(name)
    try:
        ctx.open()
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        hint = "; it needs an NVIDIA GPU with NVENC and its driver" if "nvenc" in name else ""
        return f"does not open here (FFmpeg: {_ffmpeg_says(exc)}{hint})"
    finally:
        del ctx
    return None


def _ffmpeg_says(exc: BaseException) -> str:
    """FFmpeg's own words for a failed open, without the errno."""
    return str(getattr(exc, "strerror", None) or exc)


def _lossless_note(name: str, crf: int) -> str:
    """What ``--crf 0`` means for ``name``'s output, when it is lossless x264: a new user's
    trial got H.264's High 4:4:4 Predictive profile, which many players cannot play, unsaid."""
    if name != "libx264" or crf != 0:
        return ""
    return ("; --crf 0 is lossless: H.264's High 4:4:4 Predictive profile, which many players, "
            "phones and editors cannot play (--crf 1 and above play everywhere)")


def choose_encoder(name: str = "auto", crf: int = DEFAULT_CRF) -> EncoderChoice:
    """The encoder for ``--video-encoder name``.

    ``auto`` takes the first of :data:`AUTO_ENCODERS` that opens (NVENC, else libx264); a named
    encoder must open.

    Raises:
        LivefuseError: an unknown name, or a named encoder that does not open here.
    """
    if name not in VIDEO_ENCODER_CHOICES:
        raise LivefuseError(f"--video-encoder {name}: not one of "
                            f"{', '.join(VIDEO_ENCODER_CHOICES)}")
    if name != "auto":
        why = probe_encoder(name)
        if why is not None:
            raise LivefuseError(f"--video-encoder {name} {why}; `livefuse doctor` lists the "
                                "encoders that open")
        return EncoderChoice(name, encoder_options(name, crf),
                             note=f"{name} (chosen){_lossless_note(name, crf)}")
    skipped: list[str] = []
    for cand in AUTO_ENCODERS:
        why = probe_encoder(cand)
        if why is None:
            note = f"{cand} (auto" + (f"; {skipped[0]}" if skipped else "") + ")"
            return EncoderChoice(cand, encoder_options(cand, crf),
                                 note=note + _lossless_note(cand, crf))
        skipped.append(f"{cand} {why.split(' (')[0]}")
    raise LivefuseError("no H.264 encoder opens here (libx264 is part of PyAV's wheel: "
                        "reinstall av)")


def encoder_lines() -> list[str]:
    """``livefuse doctor``: the encoders that open, and NVENC in one line either way."""
    software = [n for n in ("libx264", "libx265") if probe_encoder(n) is None]
    nvenc = {n: probe_encoder(n) for n in NVENC_ENCODERS}
    lines = [f"video encoders: {', '.join(software) or 'none'} open (software)"]
    opened = [n for n, why in nvenc.items() if why is None]
    if opened:
        lines.append(f"NVENC: {', '.join(opened)} open (--video-encoder auto uses h264_nvenc)")
    else:
        why = next(iter(nvenc.values())) or ""
        lines.append(f"NVENC: absent: h264_nvenc {why}; files are encoded with libx264 on the "
                     "CPU")
    return lines


def nvdec_line() -> str:
    """``livefuse doctor``: whether NVDEC decoding can start (a CUDA device for H.264)."""
    why = _nvdec_unavailable("h264")
    return "NVDEC: available (H.264/HEVC/AV1 decoding on the GPU)" if why is None else \
        f"NVDEC: absent: {why}; videos are decoded on the CPU"


@functools.lru_cache(maxsize=16)
def _nvdec_unavailable(codec: str) -> str | None:
    """Why NVDEC cannot decode ``codec`` here, or ``None`` when its CUDA device opens."""
    from av.codec.hwaccel import HWAccel, hwdevices_available

    if "cuda" not in hwdevices_available():
        return "this FFmpeg build has no CUDA"
    try:
        c = av.codec.Codec(codec, "r")
    except (av.error.FFmpegError, ValueError):
        return f"no {codec} decoder"
    if not any(h.device_type.name == "cuda" for h in (c.hardware_configs or ())):
        return f"{codec} has no NVDEC support"
    try:
        HWAccel("cuda").create(c)
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        return f"no CUDA device opens (FFmpeg: {_ffmpeg_says(exc)})"
    return None


@dataclass
class OpenedVideo:
    """An input container opened for decoding, and how its video is decoded.

    Attributes:
        container: the PyAV input container (the caller closes it).
        decoder: ``NVDEC`` or ``CPU``.
        note: for the summary, e.g. ``decode: CPU (NVDEC unavailable: no CUDA device)``.
    """

    container: Any
    decoder: str
    note: str


def _open(path: Path, hwaccel: Any = None) -> Any:
    if not path.exists():
        raise VideoError(path, "file not found")
    if path.is_dir():
        raise VideoError(path, "is a folder, not a video file")
    if path.stat().st_size == 0:
        raise VideoError(path, "file is empty (0 bytes)")
    try:
        container = av.open(str(path), hwaccel=hwaccel) if hwaccel is not None else \
            av.open(str(path))
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        raise VideoError(path, f"cannot open: {plain_av_error(exc)}") from exc
    if not container.streams.video:
        container.close()
        raise VideoError(path, "has no video stream")
    return container


def open_video(path: Path, decoder: str = "cpu") -> OpenedVideo:
    """Open ``path`` for decoding its first video stream.

    Args:
        decoder: ``cpu`` or ``auto`` (the CPU: see the comment below); ``nvdec``: NVDEC when
            the codec and a CUDA device allow (frames still arrive as host frames), else the
            CPU, and the note says why.

    Raises:
        VideoError: missing, empty, a folder, unreadable, or no video stream (a plain sentence).
        LivefuseError: an unknown decoder name.
    """
    if decoder not in VIDEO_DECODER_CHOICES:
        raise LivefuseError(f"--video-decoder {decoder}: not one of "
                            f"{', '.join(VIDEO_DECODER_CHOICES)}")
    container = _open(path)
    if decoder == "cpu":
        return OpenedVideo(container, "CPU", "decode: CPU")
    if decoder == "auto":
        # NVDEC with the frames brought back to the host measured slower than the CPU and cost
        # more CPU per frame on the H200 (docs/BENCHMARKS.md §13), and batch workers sharing one
        # NVDEC serialise on it: the engine wants host frames, so auto decodes on the CPU
        return OpenedVideo(container, "CPU", "decode: CPU (auto; --video-decoder nvdec for "
                                             "NVDEC)")
    codec = container.streams.video[0].codec_context.name
    why = _nvdec_unavailable(codec)
    if why is None:
        from av.codec.hwaccel import HWAccel

        container.close()
        try:
            container = _open(path, HWAccel("cuda", allow_software_fallback=False))
            return OpenedVideo(container, "NVDEC", f"decode: NVDEC ({codec})")
        except VideoError as exc:
            why = exc.problem
            container = _open(path)
    return OpenedVideo(container, "CPU", f"decode: CPU (NVDEC unavailable: {why})")


__all__ = ["AUTO_ENCODERS", "DEFAULT_CRF", "NVENC_ENCODERS", "EncoderChoice", "OpenedVideo",
           "choose_encoder", "encoder_lines", "encoder_options", "nvdec_line", "open_video",
           "plain_av_error", "probe_encoder"]
