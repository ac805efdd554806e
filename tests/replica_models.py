"""The random-weight SCRFD and ArcFace replicas, built once per test process (seconds each).

Imported by several test modules; the cache is this module's, so one pytest run builds each
replica once, in a temporary folder removed at exit.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from livefuse.testing.replica_landmark import build_landmark106_replica
from livefuse.testing.replicas import build_arcface_replica, build_scrfd_replica

SCRFD_SEED = 2
"""The SCRFD replica's seed in the tests. Each stride's score threshold sits in the widest gap
of the anchors' scores on the calibration frames (see ``random_scrfd``); with this seed the
nearest anchor is 4.5e-3 from 0.5 on every test frame (float16 moves scores by < 1e-3) and every
frame has detections. Seed 0 leaves the 1920x1080 frame without any."""

_dir = Path(tempfile.mkdtemp(prefix="livefuse-replicas-"))
atexit.register(shutil.rmtree, _dir, ignore_errors=True)


@functools.cache
def scrfd_replica() -> Path:
    return build_scrfd_replica(_dir / "det_10g.onnx", seed=SCRFD_SEED)


@functools.cache
def arcface_replica() -> Path:
    return build_arcface_replica(_dir / "w600k_r50.onnx")


@functools.cache
def landmark_replica() -> Path:
    return build_landmark106_replica(_dir / "2d106det.onnx")
