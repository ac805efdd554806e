"""The optional extras of ``pyproject.toml``: one table, read by every install hint livefuse prints
and by ``livefuse doctor``.

livefuse installs from its checkout (the README's ``pip install ".[gui,vcam]"``), so a hint names
the extra the way the README does, and the packages with their pins for an install made
elsewhere. ``tests/test_extras.py`` keeps this table equal to ``pyproject.toml``: an extra added
there (``ray`` for ``batch``, ...) must get its row here, and so its doctor line.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from livefuse.errors import LivefuseError


@dataclass(frozen=True)
class Package:
    """One distribution of an extra.

    Attributes:
        requirement: as in ``pyproject.toml`` (``PySide6-Essentials>=6.6,<6.12``).
        module: the import name that tells whether it is installed (``PySide6``).
    """

    requirement: str
    module: str

    @property
    def distribution(self) -> str:
        """The distribution name, without its version bounds."""
        for i, c in enumerate(self.requirement):
            if c in "<>=!~[; ":
                return self.requirement[:i]
        return self.requirement


@dataclass(frozen=True)
class Extra:
    """An optional extra: its name in ``pyproject.toml``, what it enables, its packages."""

    name: str
    enables: str
    packages: tuple[Package, ...]


EXTRAS: tuple[Extra, ...] = (
    Extra("gui", "the desktop app (`livefuse`, `livefuse gui`)",
          (Package("PySide6-Essentials>=6.6,<6.12", "PySide6"),)),
    Extra("vcam", "the virtual camera (`live --virtual-cam`, the app's Virtual camera)",
          (Package("pyvirtualcam>=0.11", "pyvirtualcam"),)),
    Extra("metrics", "`live --metrics-port` (Prometheus), and in the metrics line VRAM "
          "(nvidia-ml-py) and RSS (psutil)",
          (Package("prometheus-client>=0.17", "prometheus_client"),
           Package("nvidia-ml-py>=12", "pynvml"), Package("psutil>=5.9", "psutil"))),
    Extra("torch", "the PyTorch swapper backend, and on a CUDA GPU the whole frame path on it "
          "(pick the CUDA wheel for your driver from pytorch.org)",
          (Package("torch>=2.2", "torch"),)),
    Extra("batch", "`livefuse batch` on parallel workers (Ray: an embedded local cluster, or "
          "--address to join one); without it batch runs its items in this process",
          (Package("ray>=2.48", "ray"), Package("psutil>=5.9", "psutil"))),
)
"""Every optional extra but ``test`` (the developers' tools)."""

_BY_NAME = {e.name: e for e in EXTRAS}


def extra(name: str) -> Extra:
    """The row of extra ``name``.

    Raises:
        KeyError: no such extra.
    """
    return _BY_NAME[name]


def install_hint(*names: str) -> str:
    """The one install line for extras ``names``: ``pip install ".[gui,vcam]"`` as the README
    says, run in the livefuse checkout, and the pinned packages for an install made elsewhere."""
    pkgs = " ".join(f'"{p.requirement}"' for n in names for p in extra(n).packages)
    return (f'pip install ".[{",".join(names)}]" in the livefuse folder (elsewhere: '
            f"pip install {pkgs})")


def missing(name: str) -> list[Package]:
    """The packages of extra ``name`` that do not import here (found without importing)."""
    return [p for p in extra(name).packages if importlib.util.find_spec(p.module) is None]


def require(name: str, what: str, module: str | None = None) -> None:
    """Refuse ``what`` (an option, a command) when extra ``name`` is not installed, or only its
    package ``module`` when given.

    Raises:
        LivefuseError: ``<what> needs <packages>: <install line>``.
    """
    absent = [p for p in missing(name) if module is None or p.module == module]
    if absent:
        raise LivefuseError(f"{what} needs {', '.join(p.distribution for p in absent)}: "
                            f"{install_hint(name)}")


__all__ = ["EXTRAS", "Extra", "Package", "extra", "install_hint", "missing", "require"]
