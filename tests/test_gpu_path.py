"""The GPU-resident frame path on CUDA (skipped without a CUDA device; run on the H200).

The same synthetic models through the host path (CPU, onnxruntime/OpenCV) and the device path
(staged frame, torch SCRFD, batched align, swap and paste on the GPU, pasted regions downloaded):
the outputs agree, frames staged on another thread give the same output, and the masks and the
enhancer's device paths agree with their host paths.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from replica_models import landmark_replica
from synthetic_faces import build_arcface, build_scrfd

from livefuse.config import CacheConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import LoadedImage
from livefuse.swap.enhance import FaceEnhancer
from livefuse.swap.neural_engine import NeuralPaths, build_landmarker, build_neural
from livefuse.testing import replicas_masks as R
from livefuse.testing.synthetic import build_synthetic_inswapper

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> NeuralPaths:
    d = tmp_path_factory.mktemp("gpu_models")
    return NeuralPaths(build_scrfd(d / "det.onnx"), build_arcface(d / "rec.onnx"),
                       build_synthetic_inswapper(d / "inswapper.onnx", width=8),
                       occluder=R.build_replica("occluder", d / "xseg.onnx"),
                       parser=R.build_replica("parser", d / "parser.onnx"),
                       landmarker=landmark_replica())


def _frame(cells: list[tuple[int, int]], seed: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    frame = rng.integers(40, 90, (640, 640, 3), dtype=np.uint8)
    for cx, cy in cells:
        frame[32 * cy:32 * (cy + 1), 32 * cx:32 * (cx + 1)] = 255
    return frame


def _engine(paths: NeuralPaths, device: str, precision: str = "fp32",
            cache: CacheConfig | None = None, **kw: object) -> Engine:
    cfg = EngineConfig(engine="neural", backend="torch", precision=precision,  # type: ignore[arg-type]
                       device=device, face_selector="many", smooth=False, **kw)  # type: ignore[arg-type]
    analyser, renderer = build_neural(cfg, paths)
    # the cache reads the mouth and eyes from the 106-point landmarker on the staged frame
    landmarker = None if cache is None else build_landmarker(cfg, renderer, paths)
    eng = Engine(cfg, components=(analyser, renderer), cache=cache, landmarker=landmarker)
    eng.set_source(LoadedImage(bgr=_frame([(5, 6)], 1), alpha=None, path=Path("src.png")))
    return eng


def _close(a: np.ndarray, b: np.ndarray, changed: np.ndarray, mean: float, p99: float) -> None:
    d = np.abs(a.astype(int) - b.astype(int))[changed]
    assert d.mean() <= mean and np.percentile(d, 99) <= p99, (d.mean(), np.percentile(d, 99))


def _within_regions(packet: object, frame: np.ndarray) -> None:
    """Every pixel the engine changed lies in a region it reported (a video job re-encodes only
    those and keeps the input's samples elsewhere)."""
    out, regions = packet.output, packet.regions  # type: ignore[attr-defined]
    changed = np.any(out != frame, axis=2)
    covered = np.zeros_like(changed)
    for x0, y0, x1, y1 in regions:
        covered[y0:y1, x0:x1] = True
    assert changed.any() and not (changed & ~covered).any()


def test_device_path_equals_the_host_path_with_two_faces(paths: NeuralPaths) -> None:
    frame = _frame([(4, 4), (13, 11)])
    host = _engine(paths, "cpu").process(frame.copy())
    dev_engine = _engine(paths, "cuda")
    assert dev_engine.stager is not None  # the frame goes up once, the analyser is torch's
    for _ in range(2):  # the second frame replays the captured graphs
        dev = dev_engine.process(frame.copy())
    assert host.swapped == dev.swapped == 2
    assert host.output is not None and dev.output is not None
    changed = np.abs(host.output.astype(int) - frame).sum(2) > 0
    assert changed.sum() > 5000
    _close(dev.output, host.output, changed, 1.0, 4)
    untouched = ~changed & (np.abs(dev.output.astype(int) - frame).sum(2) == 0)
    assert untouched.sum() > 0.8 * (~changed).sum()  # only the pasted regions came back
    _within_regions(host, frame)
    _within_regions(dev, frame)


def test_frames_staged_on_another_thread_give_the_same_output(paths: NeuralPaths) -> None:
    """A capture thread stages frame n+1 while frame n is processed (two in flight at most,
    as the live runner's one-slot hand-off allows): same outputs, no synchronous fallback."""
    eng = _engine(paths, "cuda", precision="fp16")
    frames = [_frame([(4 + i % 3, 4)], seed=i) for i in range(12)]
    direct = [eng.process(f.copy(), i).output for i, f in enumerate(frames)]
    handoff: queue.Queue[object] = queue.Queue(maxsize=1)

    def capture() -> None:
        for f in frames:
            handoff.put(eng.stage(f.copy()))

    t = threading.Thread(target=capture)
    t.start()
    for i in range(len(frames)):
        out = eng.process(handoff.get(timeout=30), i).output  # type: ignore[arg-type]
        assert out is not None and direct[i] is not None
        assert np.abs(out.astype(int) - direct[i].astype(int)).max() <= 1
    t.join()
    assert eng.stager.fallbacks == 0  # type: ignore[union-attr]


def test_detections_started_ahead_on_the_stream_give_the_same_output(paths: NeuralPaths) -> None:
    """A pipelined video job passes the next staged frame: its detection is queued on the CUDA
    stream behind this frame's paste-back and the regions' copy, and the host waits for the
    copy only. Faces jump between frames, so a detection read for the wrong frame would show."""
    eng = _engine(paths, "cuda", precision="fp16")
    frames = [_frame([(4 + 3 * (i % 3), 4 + i % 2)], seed=i) for i in range(12)]
    direct = [eng.process(f.copy(), i) for i, f in enumerate(frames)]
    det = eng.analyser.detector  # type: ignore[attr-defined]
    launch, launches = det.launch, []
    det.launch = lambda t: launches.append(1) or launch(t)
    staged = [eng.stage(f.copy()) for f in frames[:4]]
    for i in range(len(frames)):
        nxt = staged[i + 1] if i + 1 < len(staged) else None
        got = eng.process(staged[i], i, in_place=True, ahead=nxt)
        if i + 4 < len(frames):
            staged.append(eng.stage(frames[i + 4].copy()))
        want = direct[i]
        assert [f.bbox.round(2).tolist() for f in got.faces] == \
            [f.bbox.round(2).tolist() for f in want.faces]
        assert got.output is not None and want.output is not None
        assert np.abs(got.output.astype(int) - want.output.astype(int)).max() <= 1
    assert len(launches) == len(frames) - 1
    assert eng.stager.fallbacks == 0  # type: ignore[union-attr]


def test_frames_captured_into_lent_pinned_buffers_are_staged_without_a_copy(
        paths: NeuralPaths) -> None:
    """A capture thread writes each frame into a pinned buffer the engine lends, whose upload
    is then asynchronous with no copy; a buffer is reused while frames keep coming, and every
    output equals the one from the frame's own array."""
    eng = _engine(paths, "cuda", precision="fp16")
    stager = eng.stager
    assert stager is not None
    frames = [_frame([(4 + i % 3, 4)], seed=i) for i in range(12)]
    direct = [eng.process(f.copy(), i).output for i, f in enumerate(frames)]
    copies = stager.copies
    handoff: queue.Queue[object] = queue.Queue(maxsize=1)

    def capture() -> None:
        for f in frames:
            buf = eng.lend(f.shape)
            assert buf is not None and buf.ctypes.data != f.ctypes.data
            buf[:] = f  # the camera's own write
            handoff.put(eng.stage(buf))

    t = threading.Thread(target=capture)
    t.start()
    addresses = set()
    for i in range(len(frames)):
        staged = handoff.get(timeout=30)
        addresses.add(staged.host.ctypes.data)  # type: ignore[attr-defined]
        assert staged.device is not None and staged.device.is_cuda  # type: ignore[attr-defined]
        out = eng.process(staged, i).output  # type: ignore[arg-type]
        del staged
        assert out is not None and direct[i] is not None
        assert np.abs(out.astype(int) - direct[i].astype(int)).max() <= 1
    t.join()
    assert stager.copies == copies and stager.fallbacks == 0
    assert stager.pool.lent == len(frames) and len(addresses) < len(frames)
    assert stager.pool.owner(frames[0]) is None


def test_pixel_boost_and_masks_on_the_device(paths: NeuralPaths) -> None:
    frame = _frame([(9, 9)])
    kw = dict(pixel_boost=256, face_mask_types=("box", "occlusion", "region"))
    host = _engine(paths, "cpu", **kw).process(frame.copy())
    dev = _engine(paths, "cuda", **kw).process(frame.copy())
    assert host.swapped == dev.swapped == 1
    assert host.output is not None and dev.output is not None
    changed = np.abs(host.output.astype(int) - frame).sum(2) > 0
    assert changed.sum() > 2000
    _close(dev.output, host.output, changed, 1.5, 6)


def test_enhancer_on_the_device_with_the_cache(paths: NeuralPaths, tmp_path: Path) -> None:
    enh_file = R.export_gfpgan(R.random_unet_enhancer(0), tmp_path / "e.onnx")
    frame = _frame([(9, 9)])
    host = _engine(paths, "cpu", enhancer=None)
    host.enhancer = FaceEnhancer(enh_file, "onnxruntime", blend=100)
    dev = _engine(paths, "cuda", cache=CacheConfig(threshold=0.9, refresh_every_n=3))
    dev.enhancer = FaceEnhancer(enh_file, "torch", device="cuda", precision="fp32", blend=100,
                                cuda_graph=True)
    a = host.process(frame.copy()).output
    packets = [dev.process(frame.copy(), i) for i in range(4)]
    for packet in packets:  # the enhancer's regions and the cache's re-warped hits too
        _within_regions(packet, frame)
    outs = [packet.output for packet in packets]
    assert a is not None and all(o is not None for o in outs)
    changed = np.abs(a.astype(int) - frame).sum(2) > 0
    for o in outs:  # a miss, two re-warped hits, a refresh: the same pixels
        _close(o, a, changed, 1.5, 6)  # type: ignore[arg-type]
    assert dev.cache.stats.hits == 2


def test_align_and_paste_graphs_equal_the_eager_functions() -> None:
    """The CUDA graphs of the align and the paste (bound to one work frame, replayed as faces
    move, grow and overlap) write exactly what the eager functions write."""
    from graph_scenes import align_and_paste_scene

    from livefuse.models.graph_cache import CudaGraphs, GraphCache

    align_and_paste_scene(GraphCache(CudaGraphs("cuda")), "cuda")


def test_a_cache_hit_pastes_without_refilling_the_static_buffers() -> None:
    """The CPU test's scene on CUDA graphs: a cached patch pasted again is not stacked into the
    paste graph's buffers again, and every paste equals the eager one."""
    from graph_scenes import cached_patch_scene

    from livefuse.models.graph_cache import CudaGraphs, GraphCache

    fills = cached_patch_scene(GraphCache(CudaGraphs("cuda")), "cuda")
    assert fills == [True, False, False, False, True, True, True]


class _Scripted:
    """The real analyser's work, then scripted faces (``faces``, set by the test)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.faces: list = []

    def detect(self, frame, upsample=None):  # type: ignore[no-untyped-def]
        self.inner.detect(frame)  # type: ignore[attr-defined]
        return list(self.faces)

    def track(self, frame, faces):  # type: ignore[no-untyped-def]
        from dataclasses import replace

        self.inner.track(frame, faces)  # type: ignore[attr-defined]
        return [replace(self.faces[i], track_id=f.track_id) if i < len(self.faces) else None
                for i, f in enumerate(faces)]

    def embed(self, frame, face):  # type: ignore[no-untyped-def]
        return self.inner.embed(frame, face)  # type: ignore[attr-defined]

    def reset(self) -> None:
        self.inner.reset()  # type: ignore[attr-defined]


def _scripted_face(cx: float, cy: float, height: float) -> object:
    from livefuse.testing.synthetic import face_kps
    from livefuse.types import Face

    eye = height / 2.4
    kps = face_kps(cx, cy, eye, 5.0)
    x0, y0 = kps.min(0) - eye
    x1, y1 = kps.max(0) + eye
    return Face(bbox=np.array([x0, y0, x1, y1], np.float32), kps=kps, score=0.9)


def test_after_the_warm_up_faces_that_come_and_grow_capture_no_graph(paths: NeuralPaths) -> None:
    """Issue 17 item 2: the first frame's warm-up sweep captures every graph the session meets;
    1-4 faces of 10-60 % of the height appearing, moving and growing then capture none."""
    from livefuse.models.graph_cache import cuda_captures

    cfg = EngineConfig(engine="neural", backend="torch", precision="fp16", device="cuda",
                       face_selector="many", smooth=False, detect_every=3,
                       face_mask_types=("box", "occlusion", "region"))
    analyser, renderer = build_neural(cfg, paths)
    scripted = _Scripted(analyser)
    eng = Engine(cfg, components=(scripted, renderer), cache=CacheConfig(),  # type: ignore[arg-type]
                 warm_up=True)
    scripted.faces = [_scripted_face(320, 320, 200)]
    eng.set_source(LoadedImage(bgr=_frame([(5, 6)], 1), alpha=None, path=Path("src.png")))
    frame = _frame([(4, 4)])
    eng.process(frame.copy(), 0)
    assert eng.warm_up_s > 0
    before = cuda_captures()
    rng = np.random.default_rng(0)
    for i in range(1, 80):
        n = 1 + (i // 10) % 4
        scripted.faces = [_scripted_face(float(rng.uniform(150, 490)), float(rng.uniform(150, 490)),
                                         640 * (0.1 + 0.5 * ((i % 20) / 19))) for _ in range(n)]
        p = eng.process(frame.copy(), i, t_capture_ns=i * 16_666_667)
        assert p.swapped >= 1, (i, n)
    assert cuda_captures() == before


def test_an_injected_nan_on_the_device_is_redone_in_fp32(paths: NeuralPaths) -> None:
    """The device path defers the masks' and the enhancer's guards to the frame's download:
    a NaN found there undoes the pastes and renders the faces again, so it never reaches the
    output."""
    from test_precision_guard import ENH_IO, OCC_IO, _NanInHalf

    from livefuse.swap.masks import FaceMasker, Occluder

    frame = _frame([(9, 9)])

    def stages(precision: str) -> tuple[FaceMasker, FaceEnhancer]:
        occ = Occluder(None, "torch", "cuda", precision, module=_NanInHalf(), io=OCC_IO,
                       cuda_graph=True)
        enh = FaceEnhancer(None, "torch", "cuda", precision, blend=100,
                           module=_NanInHalf(True), io=ENH_IO, cuda_graph=True)
        return FaceMasker(("occlusion",), occluder=occ, on_device=True), enh

    outs = {}
    for precision in ("fp16", "fp32"):
        eng = _engine(paths, "cuda")
        eng.process(frame.copy())  # the warm-up, with the stock stages
        eng.renderer.masker, eng.enhancer = stages(precision)  # type: ignore[attr-defined]
        eng._warm_key = eng.warm_key(frame.shape)  # no new sweep: the NaN meets a real frame
        outs[precision] = [eng.process(frame.copy(), i).output for i in range(1, 3)]
        if precision == "fp16":
            assert eng.enhancer.precision_in_use == "fp32 (fallback)"
            assert eng.renderer.masker.occluder.precision_in_use == "fp32 (fallback)"  # type: ignore[attr-defined]
    for a, b in zip(outs["fp16"], outs["fp32"], strict=True):
        assert a is not None and b is not None
        assert np.abs(a.astype(int) - b.astype(int)).max() <= 1
