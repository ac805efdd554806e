"""The model catalog: one data row per downloadable weight file.

Sizes and SHA-256 digests are the values published for the files that Deep-Live-Cam, FaceFusion,
VisoMaster and several model manifests on GitHub download and verify (each digest below was found
identical in at least two independent public manifests). A row whose digest is not published
carries ``sha256=None``; :func:`livefuse.models.download.status` then reports it as
``unverified`` instead of pretending to have checked it.

All four rows are InsightFace models: the InsightFace licence allows non-commercial research use
only, which :data:`INSIGHTFACE_LICENCE` says wherever the models are listed.

det_10g and w600k_r50 are members of InsightFace's own ``buffalo_l`` release zip, a
:class:`PackSpec` row in :data:`PACKS`: the downloader fetches that zip first (one download
gives both) and tries a row's own ``urls`` (third-party mirrors) only when the zip fails.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import platformdirs

from livefuse.errors import LivefuseError

Role = Literal["swapper", "detector", "recogniser"]

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
        role: ``swapper``, ``detector`` or ``recogniser``.
        filename: file name inside the models folder.
        urls: mirrors, tried in order.
        size: exact file size in bytes.
        sha256: lower-case hex SHA-256 of the file, or ``None`` when no digest is published.
        licence: the weights' licence in one line.
        input_size: network input ``(width, height)`` in px.
        pack: the insightface model pack the file comes from (``buffalo_l``), if any.
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

    @property
    def size_mib(self) -> float:
        """File size in MiB."""
        return self.size / 2**20


_HF_DLC = "https://huggingface.co/hacksider/deep-live-cam/resolve/main/"
_HF_BUFFALO = "https://huggingface.co/deepghs/insightface/resolve/main/buffalo_l/"

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
        members=("det_10g", "w600k_r50"),
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
    """The catalog row called ``name`` (a ``.onnx`` suffix is tolerated).

    Raises:
        UnknownModelError: no such row.
    """
    key = name.removesuffix(".onnx")
    for spec in CATALOG:
        if spec.name == key:
            return spec
    raise UnknownModelError(name)


def models_dir(override: str | Path | None = None) -> Path:
    """The folder model files live in.

    Precedence: ``override`` (the ``--models-dir`` flag), then ``$LIVEFUSE_MODELS_DIR``, then
    ``<platformdirs user data dir>/livefuse/models``. The folder is not created here.
    """
    if override:
        return Path(override).expanduser()
    env = os.environ.get(MODELS_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("livefuse", appauthor=False)) / "models"


def model_path(spec: ModelSpec, directory: Path | None = None) -> Path:
    """Where ``spec``'s file lives (``directory`` defaults to :func:`models_dir`)."""
    return (directory if directory is not None else models_dir()) / spec.filename
