"""Engine options shared by `livefuse run` and `livefuse live` (choices from livefuse.config).

Parsing only turns flags into an :class:`EngineConfig` (``--engine auto`` stays ``auto``);
:func:`choose_engine`, called by the command once the arguments are parsed, resolves ``auto``
through :func:`livefuse.models.engine_choice.resolve_engine` (the one place that does it) and
refuses options the chosen engine would ignore.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from livefuse.config import (
    BACKEND_CHOICES,
    BLEND_CHOICES,
    BLEND_HELP,
    ENGINE_REQUEST_CHOICES,
    ENHANCER_CHOICES,
    FACE_MASK_REGION_CHOICES,
    FACE_MASK_TYPE_CHOICES,
    FACE_SELECTOR_CHOICES,
    MAX_CRF,
    PIXEL_BOOST_CHOICES,
    PRECISION_CHOICES,
    ROTATION_CHOICES,
    EngineConfig,
    FaceSelector,
)
from livefuse.errors import ConfigError
from livefuse.models.catalog import MODELS_DIR_ENV
from livefuse.models.engine_choice import EngineChoice, resolve_engine

RUN_DEFAULTS = EngineConfig(engine="auto")
"""``livefuse run``'s engine defaults: every face, detection on every frame, rotated faces tried
(a live session's are :data:`livefuse.config.LIVE_DEFAULTS`)."""

if TYPE_CHECKING:
    from livefuse.io.video import VideoOptions


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` that shows every option's default, except where the help text already says
    it, where there is none (``None``) and for on/off flags (their default is "off")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if ("%(default)" in text or "default:" in text or action.default is None
                or action.nargs == 0):
            return text
        return super()._get_help_string(action)





def at_least(low: float, kind: type[int] | type[float] = int, strict: bool = False
             ) -> Callable[[str], Any]:
    """An argparse ``type`` that parses ``kind`` and refuses values under ``low`` (at or under it
    with ``strict``) in the option's own terms: ``--detect-every 0`` says "must be at least 1",
    not the config field's name a later check would give."""
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'a whole number' if kind is int else 'a number'}") from None
        if value != value or value in (float("inf"), float("-inf")):  # nan, inf
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        if value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(
                f"{text} must be {'more than' if strict else 'at least'} {low:g}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in "invalid int value"
    return parse


def within(low: float, high: float, low_open: bool = False) -> Callable[[str], float]:
    """An argparse ``type`` for a number in ``low..high`` (``(low, high]`` with ``low_open``),
    refused in the option's own terms: ``--face-mask-blur 5`` said "face_mask_blur=5.0 must
    be within 0..1", the config field's name (a new user's trial)."""
    number = at_least(float("-inf"), float)  # a finite number, or its own message

    def parse(text: str) -> float:
        value = float(number(text))
        if value < low or (low_open and value == low) or value > high:
            bounds = f"({low:g}, {high:g}]" if low_open else f"{low:g}..{high:g}"
            raise argparse.ArgumentTypeError(f"{text} must be within {bounds}")
        return value

    parse.__name__ = "float"
    return parse


def file_name(text: str) -> Path:
    """An argparse ``type`` for an output file: a name ending in a path separator (``out/``)
    means a folder, which ``Path`` would silently turn into a file name (``out``), and the
    error would then be about its suffix."""
    if text.endswith(("/", "\\")):
        folder = text.rstrip("/\\") or "/"
        raise argparse.ArgumentTypeError(f"'{text}' names a folder; give a file name (e.g. "
                                         f"'{Path(folder) / 'swapped.mp4'}')")
    return Path(text)


def add_models_dir_arg(p: argparse.ArgumentParser, default: object = None,
                       what: str = "models folder") -> None:
    """``--models-dir DIR`` (``default``: ``None``, or ``argparse.SUPPRESS`` on a sub-command
    so that a value given before it is kept)."""
    p.add_argument("--models-dir", default=default, type=_models_folder,
                   help=f"{what} (default: ${MODELS_DIR_ENV} or the user data dir)")


def _models_folder(text: str) -> str:
    """``--models-dir``: any folder, made when needed, but not an existing file (it was taken
    and the models then looked for under it, as "not installed")."""
    if Path(text).expanduser().exists() and not Path(text).expanduser().is_dir():
        raise argparse.ArgumentTypeError(f"'{text}' is a file, not a folder")
    return text


def add_engine_args(p: argparse.ArgumentParser, defaults: EngineConfig = RUN_DEFAULTS,
                    reference: bool = True) -> None:
    """Add ``--engine --precision --backend --device --models-dir --face-selector
    --target-face-index --reference --detect-every --blend --[no-]keep-mouth`` and the neural
    engine's options, each defaulting to its value in ``defaults`` (``livefuse live`` passes
    :data:`livefuse.config.LIVE_DEFAULTS`' engine). Every help text names its default itself,
    so any parser shows them."""
    d = defaults
    p.set_defaults(engine_defaults=d)
    p.add_argument("--engine", choices=ENGINE_REQUEST_CHOICES, default=d.engine,
                   help="auto: neural when its models are present and verified, else classic; "
                        "classic: offline, no download; neural: inswapper_128 with buffalo_l's "
                        "det_10g detector and w600k_r50 recogniser (see `livefuse models`) "
                        "(default: %(default)s)")
    # the options one engine reads default to None (not given), so that one given for the
    # other engine is refused even when its value equals the default (check_engine_options)
    p.add_argument("--precision", choices=PRECISION_CHOICES, default=None,
                   help="neural: auto = fp16 on CUDA with compute capability >= 7.0, else fp32 "
                        f"(default: {d.precision})")
    p.add_argument("--backend", choices=BACKEND_CHOICES, default=None,
                   help=f"neural: our PyTorch port or onnxruntime (default: {d.backend})")
    p.add_argument("--device", default=None,
                   help=f"neural: auto, cpu, cuda or cuda:N (default: {d.device})")
    add_models_dir_arg(p, d.models_dir, "neural: model folder")
    selector = d.face_selector
    # None = not given: --target-face-index then implies `one` (engine_config)
    p.set_defaults(default_face_selector=selector)
    p.add_argument("--face-selector", choices=FACE_SELECTOR_CHOICES, default=None,
                   help="one: the largest target face (or --target-face-index); many: every "
                        "face; reference: the face nearest to --reference; "
                        f"--target-face-index implies one (default: {selector})")
    # without ``reference`` (a preset, which keeps no photo) it is parsed, to be refused with
    # the way out, but not offered in the help
    p.add_argument("--reference", type=Path, default=None, metavar="PHOTO",
                   help="photo of the target person: swap only the face nearest to it by "
                        "embedding (implies --face-selector reference)" if reference else
                        argparse.SUPPRESS)
    p.add_argument("--target-face-index", type=at_least(0), default=None,
                   help="the one target face to swap, counted left to right from 0 (implies "
                        "--face-selector one) (default: the largest)")
    p.add_argument("--detect-every", type=at_least(1), default=d.detect_every,
                   metavar="K", help="run detection every K frames and track in between "
                                     "(default: %(default)s)")
    p.add_argument("--blend", choices=BLEND_CHOICES, default=None,
                   help=f"classic engine: {BLEND_HELP} (default: {d.blend})")
    p.add_argument("--keep-mouth", action=argparse.BooleanOptionalAction, default=None,
                   help="keep the target's open inner mouth (teeth, tongue) over the swap: the "
                        "classic engine finds it from its 68 landmarks (and leaves out the "
                        "source's own teeth), the neural one with the "
                        "face parser, so there only with --face-mask-types region (default: on "
                        "wherever the engine can)")
    p.add_argument("--rotation", choices=ROTATION_CHOICES, default=d.rotation,
                   help="tilted, sideways and upside-down faces: the frame is also tried turned "
                        "by every 45 degrees and each face taken from the turn that shows it "
                        "upright; auto = for still images, and in a stream when no face is "
                        "found upright or one lies on its side, then at the turns that found "
                        "faces on the next frames; always = at every detection (8x the "
                        "detector's cost) (default: %(default)s)")
    p.add_argument("--pixel-boost", type=int, choices=PIXEL_BOOST_CHOICES, default=None,
                   help="neural: swap at this aligned size (the 128 px model on 2x2, 3x3 or 4x4 "
                        f"sub-grids: sharper, 4/9/16x the work) (default: {d.pixel_boost})")
    p.add_argument("--face-mask-types", nargs="+", choices=FACE_MASK_TYPE_CHOICES,
                   default=None, metavar="TYPE",
                   help="neural: masks on top of the feathered edge: box (padded, blurred box), "
                        "occlusion (XSeg: keeps what is in front of the face), region (BiSeNet "
                        "parser: only --face-mask-regions; keeps an open mouth) (default: none)")
    p.add_argument("--face-mask-regions", nargs="+", choices=FACE_MASK_REGION_CHOICES,
                   default=None, metavar="REGION",
                   help="neural, with the region mask: the regions swapped "
                        f"({', '.join(FACE_MASK_REGION_CHOICES)}) (default: all)")
    p.add_argument("--face-mask-blur", type=within(0, 1), default=None,
                   help=f"neural, box mask: blur, 0..1 (default: {d.face_mask_blur})")
    p.add_argument("--face-mask-padding", type=within(0, 100), nargs=4, default=None,
                   metavar=("TOP", "RIGHT", "BOTTOM", "LEFT"),
                   help="neural, box mask: padding in percent (default: 0 0 0 0)")
    p.add_argument("--enhancer", choices=ENHANCER_CHOICES, default=None,
                   help="face enhancer run on each swapped face at 512 px (needs its model: "
                        "`livefuse models fetch NAME`); with the cache on it runs on cache misses "
                        "only (default: none)")
    p.add_argument("--enhancer-blend", type=within(0, 100), default=None,
                   help="0..100: how much of the --enhancer's output is used "
                        f"(default: {d.enhancer_blend})")
    p.add_argument("--no-smooth", dest="smooth", action="store_false",
                   help="do not steady landmarks between frames (One-Euro filter; default: on)")


# options that only one engine reads: given for the other one, they would be ignored silently
# (the enhancer too: the settings panel and the README offer it with the neural engine only,
# and its effect on the classic engine's faces is neither tested nor looked at)
_NEURAL_ONLY = ("precision", "backend", "device", "pixel_boost", "face_mask_types",
                "face_mask_regions", "face_mask_blur", "face_mask_padding", "enhancer",
                "enhancer_blend")
_CLASSIC_ONLY = ("blend",)


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    """The options among ``names`` given on the command line (each defaults to None), spelled
    as there."""
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n) is not None]


_T = TypeVar("_T")


def _or(value: _T | None, default: _T) -> _T:
    return default if value is None else value


def _face_selector(args: argparse.Namespace, photo_later: bool = False) -> FaceSelector:
    """``--face-selector``; when it is not given, ``one`` with ``--target-face-index``,
    ``reference`` with ``--reference``, else the command's default.

    Args:
        photo_later: the reference photo is given where the settings are used (a preset's:
            ``live --reference``, the app), so ``reference`` needs none here.

    Raises:
        ConfigError: ``--face-selector reference`` without ``--reference`` (unless
            ``photo_later``), ``--reference`` with another selector, ``--target-face-index``
            with a selector other than ``one``.
    """
    selector = args.face_selector
    if selector is None:
        if args.target_face_index is not None and args.reference is not None:
            raise ConfigError("--target-face-index and --reference each pick the face to swap: "
                              "give one of them")
        if args.target_face_index is not None:
            return "one"
        if args.reference is not None:
            return "reference"
        return args.default_face_selector
    if args.target_face_index is not None and selector != "one":
        raise ConfigError(f"--target-face-index picks one face: it cannot be used with "
                          f"--face-selector {selector}")
    if selector == "reference" and args.reference is None and not photo_later:
        raise ConfigError("--face-selector reference needs --reference PHOTO (the face to swap "
                          "is the one nearest to that person)")
    if args.reference is not None and selector != "reference":
        raise ConfigError(f"--reference is used only with --face-selector reference, not "
                          f"{selector}")
    return selector


def engine_config(args: argparse.Namespace, photo_later: bool = False) -> EngineConfig:
    """The validated EngineConfig for parsed :func:`add_engine_args` options, as given:
    ``--engine auto`` stays ``auto`` (nothing is probed here; see :func:`choose_engine`).
    ``photo_later``: see :func:`_face_selector`.

    Raises:
        ConfigError: an option is out of range, or a face selector combination that cannot
            work (see :func:`_face_selector`).
    """
    d: EngineConfig = args.engine_defaults
    if args.enhancer_blend is not None and args.enhancer is None:
        raise ConfigError(f"--enhancer-blend {args.enhancer_blend:g}: it sets how much of the "
                          "enhancer's output is used, and no --enhancer was given")
    return EngineConfig(engine=args.engine, precision=_or(args.precision, d.precision),
                        backend=_or(args.backend, d.backend),
                        device=_or(args.device, d.device), models_dir=args.models_dir,
                        face_selector=_face_selector(args, photo_later),
                        target_face_index=args.target_face_index,
                        detect_every=args.detect_every, blend=_or(args.blend, d.blend),
                        keep_mouth=d.keep_mouth if args.keep_mouth is None else args.keep_mouth,
                        rotation=args.rotation,
                        smooth=args.smooth, pixel_boost=_or(args.pixel_boost, d.pixel_boost),
                        face_mask_types=tuple(args.face_mask_types or d.face_mask_types),
                        face_mask_regions=tuple(args.face_mask_regions or d.face_mask_regions),
                        face_mask_blur=_or(args.face_mask_blur, d.face_mask_blur),
                        face_mask_padding=tuple(args.face_mask_padding or d.face_mask_padding),
                        enhancer=args.enhancer,
                        enhancer_blend=_or(args.enhancer_blend, d.enhancer_blend)).validate()


def _check_mask_options(args: argparse.Namespace) -> None:
    """The neural engine's mask options that another one must come with: each is read only
    under the mask it tunes.

    Raises:
        ConfigError: ``--[no-]keep-mouth`` or ``--face-mask-regions`` without the region mask,
            ``--face-mask-blur`` or ``--face-mask-padding`` without the box mask.
    """
    types = args.face_mask_types or ()
    if args.keep_mouth is not None and "region" not in types:
        raise ConfigError(f"--{'' if args.keep_mouth else 'no-'}keep-mouth: the neural engine "
                          "finds the mouth with the face parser, so it reads this option only "
                          "with --face-mask-types region (without it the mouth is swapped)")
    for names, mask in ((("face_mask_regions",), "region"),
                        (("face_mask_blur", "face_mask_padding"), "box")):
        given = _given(args, names)
        if given and mask not in types:
            raise ConfigError(f"{' '.join(given)}: {'it tunes' if len(given) == 1 else 'they tune'}"
                              f" the {mask} mask, and --face-mask-types does not include "
                              f"{mask} (give --face-mask-types {mask})")


def check_engine_options(args: argparse.Namespace, choice: EngineChoice) -> None:
    """Refuse the options the chosen engine does not read (they would be ignored silently).

    Raises:
        ConfigError: ``--face-mask-types`` with the classic engine, ``--blend`` with the neural
            one, ``--[no-]keep-mouth`` with the neural one without the region mask, and the
            like; the message names the options and the way out.
    """
    engine = choice.engine
    if engine == "neural":
        _check_mask_options(args)
    wrong = _given(args, _NEURAL_ONLY if engine == "classic" else _CLASSIC_ONLY)
    if engine == "classic" and not choice.auto_fell_back and args.models_dir is not None:
        # with --engine auto the folder was read, to look for the neural models
        wrong.append("--models-dir")
    if not wrong:
        return
    other = "neural" if engine == "classic" else "classic"
    hint = (" (the neural models are not installed: `livefuse models fetch det_10g "
            "w600k_r50 inswapper_128`)" if choice.auto_fell_back else f" (--engine {other})")
    raise ConfigError(f"{' '.join(wrong)}: only the {other} engine uses "
                      f"{'this option' if len(wrong) == 1 else 'these options'}, and this "
                      f"run uses the {engine} engine{hint}")


def choose_engine(args: argparse.Namespace) -> EngineConfig:
    """:func:`engine_config` with ``--engine auto`` resolved (the choice and its reason
    printed to stderr); called by the command, after parsing.

    Raises:
        ConfigError: see :func:`engine_config` and :func:`check_engine_options`.
    """
    config = engine_config(args)
    choice = resolve_engine(config)
    # after the check: a refused option is the only line, not one after the engine's
    check_engine_options(args, choice)
    if choice.requested == "auto":
        print(f"engine: {choice.engine} ({choice.reason})", file=sys.stderr)
    return choice.applied(config)


def crf_value(text: str) -> int:
    """An argparse ``type`` for ``--crf``: a whole number on x264's CRF scale, 0 to 51."""
    value = int(at_least(0)(text))
    if value > MAX_CRF:
        raise argparse.ArgumentTypeError(f"{text} must be at most {MAX_CRF}")
    return value


crf_value.__name__ = "int"


def add_video_args(p: argparse.ArgumentParser) -> None:
    """Add ``--video-encoder``, ``--video-decoder`` and ``--crf`` (`run` and `batch`)."""
    from livefuse.config import VIDEO_DECODER_CHOICES, VIDEO_ENCODER_CHOICES
    from livefuse.io.codecs import DEFAULT_CRF

    p.add_argument("--video-encoder", choices=VIDEO_ENCODER_CHOICES, default="auto",
                   help="video output encoder: auto = NVENC H.264 when it really opens on this "
                        "GPU, else libx264 (`livefuse doctor` lists what opens) "
                        "(default: %(default)s)")
    p.add_argument("--video-decoder", choices=VIDEO_DECODER_CHOICES, default="auto",
                   help="video input decoding: auto = the CPU (NVDEC, bringing frames back to "
                        "the host, measured slower); nvdec = NVDEC when the codec and a CUDA "
                        "device allow, else the CPU; the summary says which ran and why "
                        "(default: %(default)s)")
    # None, not the default value: an image target refuses --crf given at all
    p.add_argument("--crf", type=crf_value, default=None, metavar="0-51",
                   help="video output quality on x264's CRF scale: lower is better and larger, "
                        "about 6 more halves the size; x265 and NVENC are mapped onto it "
                        f"(default: {DEFAULT_CRF}, visually lossless)")


def video_only_options(args: argparse.Namespace, chunk_seconds: float | None = None
                       ) -> list[str]:
    """The options given that act only on videos, as typed (``--crf 20``): the encoder, the
    decoder, the quality, and the ones that act across frames (``--detect-every``,
    ``--no-smooth``; `batch` passes its ``--chunk-seconds``). For a still image (one ``run``
    target, or a ``batch`` of images only) each would be accepted and do nothing, so callers
    refuse them. Defaults are not "given": ``--crf`` and ``--chunk-seconds`` default to
    ``None``."""
    from livefuse.config import EngineConfig

    given = [f"--{name.replace('_', '-')} {value}"
             for name, value in (("video_encoder", args.video_encoder),
                                 ("video_decoder", args.video_decoder)) if value != "auto"]
    if args.detect_every != EngineConfig().detect_every:
        given.append(f"--detect-every {args.detect_every}")
    if not args.smooth:
        given.append("--no-smooth")
    if args.crf is not None:
        given.append(f"--crf {args.crf}")
    if chunk_seconds is not None:
        given.append(f"--chunk-seconds {chunk_seconds:g}")
    return given


def video_options(args: argparse.Namespace) -> VideoOptions:
    """The :class:`~livefuse.io.video.VideoOptions` for parsed :func:`add_video_args` options;
    a named encoder that does not open here is refused now, before any model is loaded.

    Raises:
        LivefuseError: the encoder does not open on this machine.
    """
    from livefuse.io.codecs import DEFAULT_CRF, choose_encoder
    from livefuse.io.video import VideoOptions

    choose_encoder(args.video_encoder)
    crf = DEFAULT_CRF if args.crf is None else args.crf
    return VideoOptions(encoder=args.video_encoder, decoder=args.video_decoder, crf=crf)


def add_source_args(p: argparse.ArgumentParser) -> None:
    """Add ``--source-face-index`` (`run` and `batch`)."""
    p.add_argument("--source-face-index", type=at_least(0), default=None,
                   help="face of the source photo to use, left to right from 0 among the "
                        "plausible faces (default: the most confident one)")
