"""Settings as frozen values. The choice sets are defined once here and read by the CLI and the GUI.

Nothing in livefuse reads a global setting: a component takes the config value it needs when it is
built, and a live change is a new config value handed to ``LiveRunner.apply``.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import platformdirs
import tomli_w

from livefuse.errors import ConfigError

EngineName = Literal["classic", "neural"]
EngineRequest = Literal["auto", "classic", "neural"]
Precision = Literal["auto", "fp32", "fp16", "bf16"]
Backend = Literal["torch", "onnxruntime"]
FaceSelector = Literal["one", "many", "reference"]
BlendMode = Literal["feather", "seamless"]
CaptureKind = Literal["camera", "video", "test pattern"]
Rotation = Literal["off", "auto", "always"]
GuardMode = Literal["off", "blur", "hold"]

ENGINE_CHOICES: tuple[str, ...] = get_args(EngineName)
ENGINE_REQUEST_CHOICES: tuple[str, ...] = get_args(EngineRequest)
"""What a user may ask for (CLI ``--engine``, the app's Engine box): ``auto`` = neural when its
models are present and verified, else classic, resolved by
:func:`livefuse.models.engine_choice.resolve_engine` and nowhere else."""
PRECISION_CHOICES: tuple[str, ...] = get_args(Precision)
BACKEND_CHOICES: tuple[str, ...] = get_args(Backend)
FACE_SELECTOR_CHOICES: tuple[str, ...] = get_args(FaceSelector)
BLEND_CHOICES: tuple[str, ...] = get_args(BlendMode)
BLEND_HELP = ("feather: a soft alpha edge, keeps the source's identity; seamless: Poisson "
              "cloning, matches the light at the edge but washes identity out")
"""What each blend does, one text for ``--blend`` and the app's tooltip."""
CAPTURE_CHOICES: tuple[str, ...] = get_args(CaptureKind)
ROTATION_CHOICES: tuple[str, ...] = get_args(Rotation)
GUARD_CHOICES: tuple[str, ...] = get_args(GuardMode)
"""The privacy guard (:class:`GuardConfig`): ``off``; ``blur`` pixelates every face that is not
swapped (a lost face's last known region, grown with its motion); ``hold`` repeats the last fully
swapped frame for up to ``hold_frames`` frames, then blurs."""
FACE_MASK_TYPE_CHOICES: tuple[str, ...] = ("box", "occlusion", "region")
"""Neural engine masks, combined by per-pixel minimum with the built-in feathered edge: ``box``
(FaceFusion's padded, blurred box), ``occlusion`` (the XSeg occluder model: what is in front of
the face stays), ``region`` (the BiSeNet face parser: only the chosen regions are swapped)."""
FACE_MASK_REGION_CHOICES: tuple[str, ...] = (
    "skin", "left-eyebrow", "right-eyebrow", "left-eye", "right-eye", "glasses", "nose", "mouth",
    "upper-lip", "lower-lip")
"""Regions the ``region`` mask can keep (FaceFusion's face-mask regions; parser classes)."""
ENHANCER_CHOICES: tuple[str, ...] = ("gfpgan_1.4", "gfpgan_1.4_facefusion", "gpen_bfr_512")
"""Face enhancer models (catalog rows)."""
PIXEL_BOOST_CHOICES: tuple[int, ...] = (128, 256, 384, 512)
"""Aligned sizes of the neural swap: 128 (inswapper's own), or pixel boost's 2×2, 3×3, 4×4."""
RESOLUTION_CHOICES: tuple[tuple[int, int], ...] = ((640, 480), (1280, 720), (1920, 1080))
"""Camera sizes offered by the app (any size works from the CLI)."""
VIDEO_ENCODER_CHOICES: tuple[str, ...] = (
    "auto", "libx264", "libx265", "h264_nvenc", "hevc_nvenc", "av1_nvenc")
"""Video file encoders (``run``, ``batch``): ``auto`` = NVENC H.264 when it really opens on this
GPU, else libx264 (:func:`livefuse.io.codecs.choose_encoder`)."""
MAX_CAPTURE_SIDE = 8192
"""The largest camera and virtual-camera side taken (8K is 7680): a new user's trial gave
``--width 99999 --virtual-cam``, accepted while ``--fps 1e9`` was refused."""
MAX_CRF = 51
"""The top of x264's CRF scale for 8-bit video (x264 --fullhelp: "--crf <float>", 0-51): the
--crf option's range, and where the other encoders' scales end too."""
VIDEO_DECODER_CHOICES: tuple[str, ...] = ("auto", "cpu", "nvdec")
"""Video file decoding: ``auto`` = the CPU (NVDEC, bringing each frame back to the host, measured
slower); ``nvdec`` = NVDEC when the codec and a CUDA device allow, else the CPU, as the run
summary says (:func:`livefuse.io.codecs.open_video`)."""

VRAM_LIMIT = 0.85
"""The VRAM guard: no new neural session when more than this fraction of device memory is in use
(:func:`livefuse.swap.neural.check_vram`; the Grafana board draws it as a line)."""
CONTROL_HOST = "127.0.0.1"
"""The control API listens here unless the user names another address (local only)."""

MODEL_RELOAD_FIELDS = frozenset({"engine", "precision", "backend", "device", "models_dir",
                                 "face_mask_types", "enhancer"})
"""EngineConfig fields whose change needs the models loaded again; the others are taken by a
running engine in place (:meth:`livefuse.engine.Engine.apply`)."""


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is not one of {', '.join(choices)}")


@dataclass(frozen=True)
class EngineConfig:
    """How faces are found and swapped.

    Attributes:
        engine: ``classic`` (offline, no download), ``neural`` (inswapper-class models) or
            ``auto`` (neural when its models are present, resolved when the engine is built:
            :func:`livefuse.models.engine_choice.resolve_engine`).
        precision: ``auto`` picks fp16 on CUDA with compute capability >= 7.0, else fp32.
        backend: runtime for the neural swapper.
        face_selector: ``one`` target face, ``many`` (all), or ``reference`` (nearest to a
            reference face by embedding).
        target_face_index: with ``one``: ``None`` = the largest face, else the index in
            left-to-right order of bbox centres.
        detect_every: run the detector every k frames and track landmarks in between (video only).
        keep_mouth: keep the target's inner mouth (teeth, tongue) on the swapped face; the
            classic engine also leaves out the source's own teeth (its lips are swapped).
        blend: ``feather`` (fast, for live) or ``seamless`` (Poisson, slower).
        jaw_from_target: 0..1, how far the swapped jaw line follows the target's jaw
            (0 = the source's face shape, 1 = the target's).
        mouth_from_target: 0..1, how far the swapped mouth follows the target's mouth.
            0.2 and 0.3 keep every face of astronaut -> t1.jpg at least 0.06 closer to the
            source under the checker's own jitter (one-pixel shifts of the picture); 0.3 and
            0.5 let one fall to 0.04 (docs/CLASSIC.md, issue 18).
        device: neural engine: ``auto`` (CUDA when torch sees one), ``cpu``, ``cuda``, ``cuda:N``.
        models_dir: neural engine: model folder; ``None`` = ``$LIVEFUSE_MODELS_DIR`` or the user
            data dir.
        rotation: faces on their side or upside down (see
            :data:`livefuse.faces.rotation.RotationMode`): ``auto`` tries the frame turned by
            every 45° when no face is upright or one lies on its side (a detection costs up to
            8x on frames without a face, so live sessions default to ``off``), ``always`` at
            every detection.
        smooth: steady landmarks: a One-Euro filter per tracked face (video and live only).
        pixel_boost: neural engine: the aligned size the face is swapped at (see
            :data:`PIXEL_BOOST_CHOICES`); above 128 the 128 px model runs on the strided
            sub-grids (4, 9 or 16 runs per face, one batch).
        face_mask_types: neural engine: masks on top of the feathered edge (see
            :data:`FACE_MASK_TYPE_CHOICES`); ``region`` also keeps the target's open mouth when
            ``keep_mouth`` is on.
        face_mask_regions: with the ``region`` mask, the regions swapped.
        face_mask_blur: the ``box`` mask's blur, 0..1 of half the crop (FaceFusion's 0.3).
        face_mask_padding: the ``box`` mask's padding, percent (top, right, bottom, left).
        enhancer: a face enhancer model (:data:`ENHANCER_CHOICES`) run on each swapped face at
            512 px, or ``None``. With the pose cache on, it runs on cache misses only.
        enhancer_blend: 0..100, how much of the enhancer's output is used.
    """

    engine: EngineRequest = "classic"
    precision: Precision = "auto"
    backend: Backend = "torch"
    face_selector: FaceSelector = "many"
    target_face_index: int | None = None
    detect_every: int = 1
    keep_mouth: bool = True
    blend: BlendMode = "feather"
    jaw_from_target: float = 0.2
    mouth_from_target: float = 0.3
    device: str = "auto"
    models_dir: str | None = None
    rotation: Rotation = "auto"
    smooth: bool = True
    pixel_boost: int = 128
    face_mask_types: tuple[str, ...] = ()
    face_mask_regions: tuple[str, ...] = FACE_MASK_REGION_CHOICES
    face_mask_blur: float = 0.3
    face_mask_padding: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    enhancer: str | None = None
    enhancer_blend: float = 80.0

    def __post_init__(self) -> None:
        # TOML and argparse give lists; frozen settings hold tuples (hashable, comparable)
        for name in ("face_mask_types", "face_mask_regions", "face_mask_padding"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))

    def validate(self) -> EngineConfig:
        """Return ``self`` or raise :class:`ConfigError` naming the bad field."""
        _check_choice("engine", self.engine, ENGINE_REQUEST_CHOICES)
        _check_choice("precision", self.precision, PRECISION_CHOICES)
        _check_choice("backend", self.backend, BACKEND_CHOICES)
        _check_choice("face_selector", self.face_selector, FACE_SELECTOR_CHOICES)
        _check_choice("blend", self.blend, BLEND_CHOICES)
        _check_choice("rotation", self.rotation, ROTATION_CHOICES)
        for name, values, choices in (
                ("face_mask_types", self.face_mask_types, FACE_MASK_TYPE_CHOICES),
                ("face_mask_regions", self.face_mask_regions, FACE_MASK_REGION_CHOICES)):
            unknown = [v for v in values if v not in choices]
            if unknown:
                raise ConfigError(f"{name}: {', '.join(map(str, unknown))} not among "
                                  f"{', '.join(choices)}")
        if "region" in self.face_mask_types and not self.face_mask_regions:
            raise ConfigError("the region mask needs at least one of face_mask_regions")
        if not 0.0 <= self.face_mask_blur <= 1.0:
            raise ConfigError(f"face_mask_blur={self.face_mask_blur} must be within 0..1")
        if len(self.face_mask_padding) != 4 or \
                not all(0.0 <= p <= 100.0 for p in self.face_mask_padding):
            raise ConfigError(f"face_mask_padding={self.face_mask_padding} must be 4 values "
                              "within 0..100 (top, right, bottom, left)")
        if self.enhancer is not None:
            _check_choice("enhancer", self.enhancer, ENHANCER_CHOICES)
        if not 0.0 <= self.enhancer_blend <= 100.0:
            raise ConfigError(f"enhancer_blend={self.enhancer_blend} must be within 0..100")
        if self.pixel_boost not in PIXEL_BOOST_CHOICES:
            raise ConfigError(f"pixel_boost={self.pixel_boost} is not one of "
                              f"{', '.join(map(str, PIXEL_BOOST_CHOICES))}")
        if self.detect_every < 1:
            raise ConfigError(f"detect_every={self.detect_every} must be >= 1")
        if self.target_face_index is not None and self.target_face_index < 0:
            raise ConfigError(f"target_face_index={self.target_face_index} must be >= 0")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ConfigError(f"device={self.device!r} must be auto, cpu, cuda or cuda:N")
        for name in ("jaw_from_target", "mouth_from_target"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ConfigError(f"{name}={v} must be within 0..1")
        return self


@dataclass(frozen=True)
class CacheConfig:
    """The pose-similarity cache (see design.md section 4).

    Attributes:
        enabled: reuse a face's swap result while its pose key stays close.
        threshold: similarity in 0..1 at or above which a cached swap is reused. 0.8 is measured
            (benchmarks/bench_cache.py): 78 % hits at SSIM 0.995 on the demo clip; at 0.95 dlib's
            frame-to-frame landmark jitter leaves 17 % hits.
        refresh_every_n: an entry serves at most N frames (the miss frame included), then a
            fresh swap is forced; 1 turns reuse off.
    """

    enabled: bool = True
    threshold: float = 0.8
    refresh_every_n: int = 5

    def validate(self) -> CacheConfig:
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"cache threshold={self.threshold} must be within (0, 1]")
        if self.refresh_every_n < 1:
            raise ConfigError(f"cache refresh_every_n={self.refresh_every_n} must be >= 1")
        return self


@dataclass(frozen=True)
class CaptureConfig:
    """Where a live session's frames come from.

    Attributes:
        kind: ``camera``, ``video`` (a file standing in for the camera) or ``test pattern``.
        camera: camera index (``0``) or device path (``/dev/video2``).
        video: the video file for ``kind='video'``.
        loop: loop the video file (the app does; ``livefuse live`` only with ``--loop``).
        width, height: requested camera size in px (the camera may negotiate another).
        fps: requested camera rate, and the virtual camera's rate.
        max_open_attempts: give up after this many failed opens in a row (``None``: keep
            retrying, as the app does, with a visible status).
    """

    kind: CaptureKind = "camera"
    camera: str = "0"
    video: str | None = None
    loop: bool = True
    width: int = 1280
    height: int = 720
    fps: float = 30.0
    max_open_attempts: int | None = None

    def validate(self) -> CaptureConfig:
        _check_choice("capture kind", self.kind, CAPTURE_CHOICES)
        if self.width < 16 or self.height < 16:
            raise ConfigError(f"capture size {self.width}x{self.height} is below 16x16 px")
        if max(self.width, self.height) > MAX_CAPTURE_SIDE:
            raise ConfigError(f"capture size {self.width}x{self.height} is above "
                              f"{MAX_CAPTURE_SIDE} px a side")
        if not 1.0 <= self.fps <= 240.0:
            raise ConfigError(f"capture fps={self.fps} must be within 1..240")
        if self.max_open_attempts is not None and self.max_open_attempts < 1:
            raise ConfigError(f"max_open_attempts={self.max_open_attempts} must be >= 1")
        return self


@dataclass(frozen=True)
class OutputConfig:
    """Where a live session's frames go besides the preview.

    Attributes:
        virtual_camera: send frames to a virtual camera (pyvirtualcam).
        vcam_device: the virtual camera device (``None``: the first that works).
        record: also record the output to this file (.mp4, .mkv, .mov), or ``None``.
        mirror_preview: flip the app's preview horizontally (a selfie view); ``None`` = on for a
            camera input, off for a video file or the test pattern. Never applied to the
            virtual camera or the recording.
    """

    virtual_camera: bool = False
    vcam_device: str | None = None
    record: str | None = None
    mirror_preview: bool | None = None

    def mirrored(self, capture: CaptureConfig) -> bool:
        """Whether the preview is mirrored for this input."""
        return capture.kind == "camera" if self.mirror_preview is None else self.mirror_preview


@dataclass(frozen=True)
class GuardConfig:
    """The privacy guard: no frame leaves with a face unaltered while it is on (design.md §9).

    Attributes:
        mode: see :data:`GUARD_CHOICES`. While it is not ``off`` the detector runs on every
            frame (tracking cannot see a face that enters between detections).
        hold_frames: ``hold``: how many frames in a row the last fully swapped frame may be
            repeated before the guard blurs instead (15 = half a second at 30 fps).
    """

    mode: GuardMode = "off"
    hold_frames: int = 15

    def validate(self) -> GuardConfig:
        _check_choice("privacy guard", self.mode, GUARD_CHOICES)
        if not 1 <= self.hold_frames <= 600:
            raise ConfigError(f"hold_frames={self.hold_frames} must be within 1..600")
        return self


@dataclass(frozen=True)
class ControlConfig:
    """The local control API (Stream Deck, Companion, OBS scripts; :mod:`livefuse.control`).

    Attributes:
        enabled: serve it while the session exists.
        port: TCP port (1..65535; 0 picks a free one, for tests).
        host: the address to listen on: :data:`CONTROL_HOST` unless the user names another.
    """

    enabled: bool = False
    port: int = 8765
    host: str = CONTROL_HOST

    def validate(self) -> ControlConfig:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"control port={self.port} must be within 0..65535")
        if not self.host.strip():
            raise ConfigError("control host must not be empty")
        return self


@dataclass(frozen=True)
class AppConfig:
    """Everything a live session needs, as one frozen value: what the app persists and what
    ``livefuse live`` builds from its flags (:class:`livefuse.session.Session` takes it)."""

    engine: EngineConfig = field(default_factory=EngineConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    control: ControlConfig = field(default_factory=ControlConfig)

    def validate(self) -> AppConfig:
        self.engine.validate()
        self.cache.validate()
        self.capture.validate()
        self.guard.validate()
        self.control.validate()
        return self

    def effective_engine(self) -> EngineConfig:
        """The engine settings the session really runs: with the privacy guard on, detection
        on every frame (a face entering between two detections would be shown as it is)."""
        if self.guard.mode == "off" or self.engine.detect_every == 1:
            return self.engine
        return dataclasses.replace(self.engine, detect_every=1)

LIVE_DEFAULTS = AppConfig(
    engine=EngineConfig(engine="auto", face_selector="one", detect_every=3, rotation="off"))
"""The defaults of a live session, one set for ``livefuse live``'s flags and the app's first
start (and for any setting ``settings.toml`` leaves out). Unlike a file job (``livefuse run``:
every face, detection on every frame, rotated faces tried), a stream swaps the one largest face,
detects every 3rd frame and tracks in between (the pose cache on), and does not try rotated
frames (up to 8x the detector's cost on frames without a face: 7 turns by 45 degrees)."""


def table_values(value: Any) -> dict[str, Any]:
    """A settings dataclass as a TOML table: ``None`` values are omitted (TOML has no null)."""
    return {k: v for k, v in dataclasses.asdict(value).items() if v is not None}


def from_table(cls: Any, data: dict[str, Any], where: str) -> Any:
    """A settings dataclass ``cls`` from a TOML table (not validated here).

    Raises:
        ConfigError: a key that ``cls`` does not have (``where`` names the file and table).
        TypeError: ``data`` is not a table.
    """
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {', '.join(unknown)}")
    return cls(**data)


def default_config_path() -> Path:
    """``settings.toml`` in the user config dir (platformdirs), e.g. ``~/.config/livefuse``."""
    return Path(platformdirs.user_config_dir("livefuse", appauthor=False)) / "settings.toml"


def save_config(cfg: AppConfig, path: Path) -> Path:
    """Write ``cfg`` as TOML, atomically (temp file + rename). ``None`` values are omitted."""
    from livefuse.imaging import atomic_write_bytes

    data = {name: table_values(getattr(cfg, name)) for name in _TABLES}
    atomic_write_bytes(path, tomli_w.dumps(data).encode("utf-8"))
    return path


_TABLES = {"engine": EngineConfig, "cache": CacheConfig, "capture": CaptureConfig,
           "output": OutputConfig, "guard": GuardConfig, "control": ControlConfig}


def load_config(path: Path, defaults: AppConfig | None = None) -> AppConfig:
    """Read an :class:`AppConfig` from a TOML file with ``[engine]``, ``[cache]``, ``[capture]``,
    ``[output]``, ``[guard]`` and ``[control]`` tables (each optional; missing settings take
    their value in ``defaults``, by default the dataclasses' own; the app passes
    :data:`LIVE_DEFAULTS`).

    Raises:
        ConfigError: the file is not valid TOML or holds an unknown or out-of-range setting.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read settings '{path}': {exc}") from exc
    unknown = sorted(set(data) - set(_TABLES))
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {', '.join(unknown)}")
    base = defaults or AppConfig()
    try:
        cfg = AppConfig(**{name: from_table(cls, {**dataclasses.asdict(getattr(base, name)),
                                                  **data.get(name, {})}, f"{path} [{name}]")
                           for name, cls in _TABLES.items()})
    except TypeError as exc:  # a table that is not a table, e.g. `engine = 3`
        raise ConfigError(f"{path}: {exc}") from exc
    return cfg.validate()
