"""The model catalog: one data row per downloadable weight file.

Sizes and SHA-256 digests are the values published for the files that Deep-Live-Cam, FaceFusion,
VisoMaster and several model manifests on GitHub download and verify (each digest below was found
identical in at least two independent public manifests). A row whose digest is not published
carries ``sha256=None``; :func:`livefuse.models.download.status` then reports it as
``unverified`` instead of pretending to have checked it.

The swapper, detector and recogniser rows are InsightFace models: the InsightFace licence allows
non-commercial research use only, which :data:`INSIGHTFACE_LICENCE` says wherever the models are
listed. The mask and enhancer rows (occluder, parser, enhancer) carry their own licences; each row
names the public manifests its digest was read from in a comment, and ``layout`` records the
graph's input/output contract as the projects that run the file use it.

det_10g, w600k_r50 and 2d106det are members of InsightFace's own ``buffalo_l`` release zip, a
:class:`PackSpec` row in :data:`PACKS`: the downloader fetches that zip first (one download
gives both) and tries a row's own ``urls`` (third-party mirrors) only when the zip fails.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import platformdirs

from livefuse.errors import ConfigError, LivefuseError

Role = Literal["swapper", "detector", "recogniser", "landmarker", "occluder", "parser",
               "enhancer"]

MODELS_DIR_ENV = "LIVEFUSE_MODELS_DIR"
"""Environment variable that overrides the models folder (a ``--models-dir`` flag wins over it)."""

INSIGHTFACE_LICENCE = (
    "InsightFace: non-commercial research use only (no commercial use of the weights)"
)


class UnknownModelError(LivefuseError):
    """A model name is not in the catalog."""

    def __init__(self, name: str) -> None:
        self.name = name
        known = ", ".join(spec.name for spec in CATALOG)
        super().__init__(f"unknown model '{name}' (known: {known})")


@dataclass(frozen=True)
class ModelSpec:
    """One downloadable model file.

    Attributes:
        name: catalog name used on the command line (``livefuse models fetch NAME``).
        role: ``swapper``, ``detector``, ``recogniser``, ``landmarker`` (dense landmarks for
            the pose cache), ``occluder`` (face-occlusion segmenter), ``parser`` (face parser)
            or ``enhancer`` (face restorer).
        filename: file name inside the models folder.
        urls: mirrors, tried in order.
        size: exact file size in bytes.
        sha256: lower-case hex SHA-256 of the file, or ``None`` when no digest is published.
        licence: the weights' licence in one line.
        input_size: network input ``(width, height)`` in px.
        pack: the insightface model pack the file comes from (``buffalo_l``), if any.
        layout: one line on the graph's input and output (names, shape, layout, value range,
            alignment) as the projects that run the file feed it; empty for the older rows.
    """

    name: str
    role: Role
    filename: str
    urls: tuple[str, ...]
    size: int
    sha256: str | None
    licence: str
    input_size: tuple[int, int]
    pack: str | None = None
    layout: str = ""

    @property
    def size_mib(self) -> float:
        """File size in MiB."""
        return self.size / 2**20


_HF_DLC = "https://huggingface.co/hacksider/deep-live-cam/resolve/main/"
_HF_BUFFALO = "https://huggingface.co/deepghs/insightface/resolve/main/buffalo_l/"
_HF_REACTOR = "https://huggingface.co/datasets/Gourieff/ReActor/resolve/main/models/facerestore_models/"
_VISO = "https://github.com/visomaster/visomaster-assets/releases/download/v0.1.0/"

XSEG_LICENCE = "DeepFaceLab XSeg (iperov): GPL-3.0"
BISENET_LICENCE = ("yakhyo/face-parsing: MIT; trained on CelebAMask-HQ, whose images are for "
                   "non-commercial research and education only")
GFPGAN_LICENCE = "GFPGAN (TencentARC): Apache-2.0; trained on FFHQ (images under CC BY-NC-SA 4.0)"
GPEN_LICENCE = "GPEN (yangxy, Alibaba DAMO): academic and non-commercial use only"

MASK_ROLES: tuple[Role, ...] = ("occluder", "parser", "enhancer")
"""Roles of the optional post-processing models (not needed to swap)."""

CATALOG: tuple[ModelSpec, ...] = (
    ModelSpec(
        name="inswapper_128",
        role="swapper",
        filename="inswapper_128.onnx",
        urls=(
            _HF_DLC + "inswapper_128.onnx",
            "https://huggingface.co/ezioruan/inswapper_128.onnx/resolve/main/inswapper_128.onnx",
            "https://github.com/facefusion/facefusion-assets/releases/download/models/"
            "inswapper_128.onnx",
        ),
        size=554_253_681,
        sha256="e4a3f08c753cb72d04e10aa0f7dbe3deebbf39567d4ead6dce08e98aa49e16af",
        licence=INSIGHTFACE_LICENCE,
        input_size=(128, 128),
    ),
    ModelSpec(
        name="inswapper_128_fp16",
        role="swapper",
        filename="inswapper_128_fp16.onnx",
        urls=(_HF_DLC + "inswapper_128_fp16.onnx",),
        size=277_680_638,
        sha256="6d51a9278a1f650cffefc18ba53f38bf2769bf4bbff89267822cf72945f8a38b",
        licence=INSIGHTFACE_LICENCE,
        input_size=(128, 128),
    ),
    ModelSpec(
        # SCRFD-10GF with keypoints (Guo et al. 2021, "Sample and Computation Redistribution for
        # Efficient Face Detection"), as shipped in insightface's buffalo_l pack.
        name="det_10g",
        role="detector",
        filename="det_10g.onnx",
        urls=(
            _HF_BUFFALO + "det_10g.onnx",
            "https://github.com/yakhyo/adaface-onnx/releases/download/weights/det_10g.onnx",
        ),
        size=16_923_827,
        sha256="5838f7fe053675b1c7a08b633df49e7af5495cee0493c7dcf6697200b85b5b91",
        licence=INSIGHTFACE_LICENCE,
        input_size=(640, 640),
        pack="buffalo_l",
    ),
    ModelSpec(
        # ArcFace ResNet-50 trained on WebFace600K (Deng et al. 2019), buffalo_l's recogniser.
        name="w600k_r50",
        role="recogniser",
        filename="w600k_r50.onnx",
        urls=(_HF_BUFFALO + "w600k_r50.onnx",),
        size=174_383_860,
        sha256="4c06341c33c2ca1f86781dab0e829f88ad5b64be9fba56e56bc9ebdefc619e43",
        licence=INSIGHTFACE_LICENCE,
        input_size=(112, 112),
        pack="buffalo_l",
    ),
    ModelSpec(
        # InsightFace's 106-point landmark model (alignment/coordinate_reg, MobileNet-0.5 backbone),
        # buffalo_l's ``2d106det.onnx``: the neural engine's pose cache reads the mouth, the
        # eyes and the head pose from it. Size and SHA-256 as pinned, identically, by several
        # independent public manifests of the buffalo_l members (yakhyo/uniface's constants, the
        # LivePortrait-based downloaders that list buffalo_l/2d106det.onnx, crappy-face-swap's
        # README) and the insightface model-hash list of roop-style projects.
        name="2d106det",
        role="landmarker",
        filename="2d106det.onnx",
        urls=(
            _HF_BUFFALO + "2d106det.onnx",
            "https://huggingface.co/KwaiVGI/LivePortrait/resolve/main/insightface/models/"
            "buffalo_l/2d106det.onnx",
            "https://github.com/yakhyo/uniface/releases/download/weights/2d106det.onnx",
        ),
        size=5_030_888,
        sha256="f001b856447c413801ef5c42091ed0cd516fcd21f2d6b79635b1e733a7109dbf",
        licence=INSIGHTFACE_LICENCE,
        input_size=(192, 192),
        pack="buffalo_l",
        layout="data (1, 3, 192, 192) RGB 0..255 (the graph normalises) -> fc1 (1, 212): "
               "106 (x, y) in [-1, 1] of a crop 1.5x the bbox around its centre",
    ),
    # ---------------------------------------------------------------- masks and enhancers
    ModelSpec(
        # DeepFaceLab's XSeg face segmenter exported to ONNX. SHA-256 in yakhyo/uniface
        # (uniface/constants.py, XSegWeights.DEFAULT) and in the Git-LFS pointers of the Hugging
        # Face repos CountFloyd/deepfake (roop-unleashed's model host) and danelcsb/face (which
        # also gives the size). FaceFusion's xseg_1/2/3.onnx are other exports of the same net
        # (same contract, input named ``input``); their digests were not found attributably.
        name="xseg",
        role="occluder",
        filename="xseg.onnx",
        urls=(
            "https://github.com/yakhyo/face-segmentation/releases/download/weights/xseg.onnx",
            "https://huggingface.co/CountFloyd/deepfake/resolve/main/xseg.onnx",
        ),
        size=70_327_737,
        sha256="0b57328efcb839d85973164b617ceee9dfe6cfcb2c82e8a033bba9f4f09b27e5",
        licence=XSEG_LICENCE,
        input_size=(256, 256),
        layout="in (1, 256, 256, 3) NHWC BGR [0, 1] -> out (1, 256, 256, 1), 1 = face "
               "(visible), 0 = occluded/background; aligned crop of the swap",
    ),
    ModelSpec(
        # BiSeNet face parser, ResNet-34 backbone (yakhyo/face-parsing release ``resnet34.onnx``).
        # SHA-256 in yakhyo/uniface (uniface/constants.py, ParsingWeights.RESNET34) and in
        # VisoMaster (app/processors/models_data.py, faceparser_resnet34.onnx); size and digest in
        # the Git-LFS pointer of huggingface.co/danelcsb/face. FaceFusion's own
        # bisenet_resnet_34.onnx is a different file (93,632,546 B) of the same network.
        name="bisenet_resnet34",
        role="parser",
        filename="bisenet_resnet34.onnx",
        urls=(
            "https://github.com/yakhyo/face-parsing/releases/download/weights/resnet34.onnx",
            _VISO + "faceparser_resnet34.onnx",
        ),
        size=93_632_554,
        sha256="5b805bba7b5660ab7070b5a381dcf75e5b3e04199f1e9387232a77a00095102e",
        licence=BISENET_LICENCE,
        input_size=(512, 512),
        layout="input (N, 3, 512, 512) RGB, ImageNet mean/std -> output (N, 19, 512, 512) "
               "CelebAMask-HQ logits (+2 auxiliary heads); aligned crop of the swap",
    ),
    ModelSpec(
        # GFPGAN v1.4 as exported for Rope/VisoMaster/ReActor. SHA-256 in VisoMaster
        # (app/processors/models_data.py), in ComfyUI ReActor's model hub (the Git-LFS pointer of
        # huggingface.co/datasets/Gourieff/ReActor, which also gives the size) and in
        # tednoob/crappy-face-swap's README; the same digest and size are in the LFS pointers of
        # huggingface.co/netrunner-exe/Face-Upscalers-onnx and cncbec/wav2lip.
        name="gfpgan_1.4",
        role="enhancer",
        filename="GFPGANv1.4.onnx",
        urls=(
            _HF_REACTOR + "GFPGANv1.4.onnx",
            "https://huggingface.co/netrunner-exe/Face-Upscalers-onnx/resolve/main/"
            "GFPGANv1.4.onnx",
            _VISO + "GFPGANv1.4.onnx",
        ),
        size=340_256_690,
        sha256="6548e54cbcf248af385248f0c1193b359c37a0f98b836282b09cf48af4fd2b73",
        licence=GFPGAN_LICENCE,
        input_size=(512, 512),
        layout="input (1, 3, 512, 512) RGB [-1, 1] -> output (1, 3, 512, 512) RGB [-1, 1] "
               "(clip); ffhq_512 alignment",
    ),
    ModelSpec(
        # FaceFusion's own GFPGAN 1.4 export (models-3.0.0/gfpgan_1.4.onnx). SHA-256 in
        # idootop/TinyFace (tinyface/core/enhancer.py) and in the Git-LFS pointer of
        # huggingface.co/uwg/modelz_base (Extras/ffff_assets/gfpgan_1.4.onnx); the size is the
        # one several public manifests give with that digest.
        name="gfpgan_1.4_facefusion",
        role="enhancer",
        filename="gfpgan_1.4.onnx",
        urls=(
            "https://github.com/facefusion/facefusion-assets/releases/download/models-3.0.0/"
            "gfpgan_1.4.onnx",
            "https://huggingface.co/facefusion/models-3.0.0/resolve/main/gfpgan_1.4.onnx",
        ),
        size=340_299_087,
        sha256="accc4757b26bdb89b32b4d3500d4f79c9dff97c1dd7c7104bf9dcb95e3311385",
        licence=GFPGAN_LICENCE,
        input_size=(512, 512),
        layout="input (1, 3, 512, 512) RGB [-1, 1] -> first output (1, 3, 512, 512) RGB "
               "[-1, 1] (clip); ffhq_512 alignment",
    ),
    ModelSpec(
        # GPEN-BFR-512 as ReActor ships it. SHA-256 and size in the Git-LFS pointers of ComfyUI
        # ReActor's hub (huggingface.co/datasets/Gourieff/ReActor) and of huggingface.co/fofr/
        # comfyui (Replicate's ComfyUI weights), also Kuvshin/kuvshin8 and martintomov/comfy.
        name="gpen_bfr_512",
        role="enhancer",
        filename="GPEN-BFR-512.onnx",
        urls=(_HF_REACTOR + "GPEN-BFR-512.onnx",
              "https://huggingface.co/fofr/comfyui/resolve/main/facerestore_models/"
              "GPEN-BFR-512.onnx"),
        size=284_244_491,
        sha256="bf80acb8e91ba8852e3f012505be2c3b6cd6b3eed5ec605e3db87863c4e74d4e",
        licence=GPEN_LICENCE,
        input_size=(512, 512),
        layout="input (1, 3, 512, 512) RGB [-1, 1] -> output (1, 3, 512, 512) RGB [-1, 1] "
               "(clip); ffhq_512 alignment",
    ),
)


@dataclass(frozen=True)
class PackSpec:
    """A release archive (zip) holding several catalog files.

    Attributes:
        name: the pack's name (``buffalo_l``); a :class:`ModelSpec` names it in ``pack``.
        filename: the archive's file name while it downloads into the models folder.
        urls: where the archive is published, tried in order.
        size: exact archive size in bytes.
        sha256: lower-case hex SHA-256 of the archive, or ``None`` when none is published
            (each member is still checked against its own catalog row).
        licence: the weights' licence in one line.
        members: catalog names of the rows installed from it; each row's ``filename`` is the
            member's name inside the zip (at its root or in one folder).
    """

    name: str
    filename: str
    urls: tuple[str, ...]
    size: int
    sha256: str | None
    licence: str
    members: tuple[str, ...]

    @property
    def size_mib(self) -> float:
        """Archive size in MiB."""
        return self.size / 2**20


PACKS: tuple[PackSpec, ...] = (
    PackSpec(
        # InsightFace's own release asset. Size and SHA-256 as pinned, identically, by many
        # independent public download manifests (Python, Go, Rust, PowerShell, Kotlin).
        name="buffalo_l",
        filename="buffalo_l.zip",
        urls=("https://github.com/deepinsight/insightface/releases/download/v0.7/buffalo_l.zip",),
        size=288_621_354,
        sha256="80ffe37d8a5940d59a7384c201a2a38d4741f2f3c51eef46ebb28218a7b0ca2f",
        licence=INSIGHTFACE_LICENCE,
        members=("det_10g", "w600k_r50", "2d106det"),
    ),
)


class UnknownPackError(LivefuseError):
    """A model row names a pack that is not in :data:`PACKS` (a catalog bug)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unknown model pack '{name}' (known: "
                         f"{', '.join(p.name for p in PACKS)})")


def get_pack(name: str) -> PackSpec:
    """The pack row called ``name`` (its archive file name is accepted too).

    Raises:
        UnknownPackError: no such row.
    """
    for pack in PACKS:
        if name in (pack.name, pack.filename):
            return pack
    raise UnknownPackError(name)


def get_spec(name: str) -> ModelSpec:
    """The catalog row called ``name`` (a ``.onnx`` suffix is tolerated), or whose file is ``name``
    (``GFPGANv1.4.onnx`` finds ``gfpgan_1.4``, so ``livefuse models import PATH`` needs no name).

    Raises:
        UnknownModelError: no such row.
    """
    key = name.removesuffix(".onnx")
    for spec in CATALOG:
        if spec.name == key or spec.filename == name or spec.filename == f"{key}.onnx":
            return spec
    raise UnknownModelError(name)


def models_dir(override: str | Path | None = None) -> Path:
    """The folder model files live in.

    Precedence: ``override`` (the ``--models-dir`` flag), then ``$LIVEFUSE_MODELS_DIR``, then
    ``<platformdirs user data dir>/livefuse/models``. The folder is not created here.

    Raises:
        ConfigError: ``$LIVEFUSE_MODELS_DIR`` names an existing file (``--models-dir`` refuses
            one when parsed; the variable was taken, and every model then "not installed").
    """
    if override:
        return Path(override).expanduser()
    env = os.environ.get(MODELS_DIR_ENV)
    if env:
        folder = Path(env).expanduser()
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"${MODELS_DIR_ENV}='{env}' is a file, not a folder: point it at "
                              "the models folder, or unset it")
        return folder
    return default_models_dir()


def default_models_dir() -> Path:
    """``<platformdirs user data dir>/livefuse/models``: the models folder when neither
    ``--models-dir`` nor ``$LIVEFUSE_MODELS_DIR`` names one."""
    return Path(platformdirs.user_data_dir("livefuse", appauthor=False)) / "models"


def model_path(spec: ModelSpec, directory: Path | None = None) -> Path:
    """Where ``spec``'s file lives (``directory`` defaults to :func:`models_dir`)."""
    return (directory if directory is not None else models_dir()) / spec.filename
