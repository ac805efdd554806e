"""The graph cache's bookkeeping on the CPU (issue 17): what CI guards without a GPU.

:class:`~livefuse.models.graph_cache.EagerGraphs` stands in for CUDA graphs: a "graph" re-runs its
function on the very tensors it was captured with, and a freed tensor is overwritten (as freed
device memory is by its next user), so a graph that outlived a buffer it reads gives a wrong
answer here, where on a GPU it might replay correctly by luck.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from livefuse.models.graph_cache import EagerGraphs, GraphCache, bucket, ladder


class _Taps:
    def __init__(self, n: int) -> None:
        self.index = torch.arange(n)
        self.weight = torch.ones(n)


def _cache(max_owners: int | None = None, capture_after: int = 1) -> GraphCache:
    return GraphCache(EagerGraphs(), max_owners, capture_after)


def test_an_owner_is_evicted_whole_and_its_memory_is_overwritten() -> None:
    cache = _cache(max_owners=2)
    a = cache.owner("a")
    frame = a.buffer("frame", (4,), torch.float32)
    frame.copy_(torch.arange(4.0))
    taps = a.value("taps", lambda: _Taps(4))
    params = a.params("p", np.arange(3, dtype=np.float32))
    out = a.run("sum", lambda f, p: ((f * taps.weight).sum() + p.sum(),), (frame, params))[0]
    assert float(out) == 9.0
    cache.owner("b")
    cache.owner("c")  # a is the least recently used: evicted with everything it holds
    assert cache.keys == ("b", "c") and cache.evictions == 1
    assert not a.alive and a.graphs == ()
    assert torch.all(frame == 77) and torch.all(taps.weight == 77) and torch.all(params == 77)
    assert float(out) == 77.0  # the graph's own output went with it
    with pytest.raises(RuntimeError, match="evicted"):
        a.run("sum", lambda f: (f,), (frame,))
    again = cache.owner("a")  # a size that comes back starts afresh
    assert again is not a and again.graphs == () and "b" not in cache


def test_the_least_recently_used_owner_goes_first() -> None:
    cache = _cache(max_owners=2)
    cache.owner("a")
    cache.owner("b")
    cache.owner("a")
    cache.owner("c")
    assert cache.keys == ("a", "c")
    cache.clear()
    assert cache.keys == () and cache.evictions == 3


def test_a_key_is_admitted_at_its_nth_use() -> None:
    cache = _cache(capture_after=2)
    assert not cache.admit((480, 640))  # a one-off size (a source photo) runs eagerly
    assert cache.admit((480, 640))
    cache.owner((480, 640))
    assert cache.admit((480, 640)) and not cache.admit((720, 1280))


def test_a_graph_is_captured_once_and_replays_its_static_inputs() -> None:
    backend = EagerGraphs(warmup=None)
    cache = GraphCache(backend)
    owner = cache.owner(1)
    x = owner.buffer("x", (3,), torch.float32)
    calls = []

    def double(t: torch.Tensor) -> tuple[torch.Tensor]:
        calls.append(1)
        return (t * 2,)

    x.copy_(torch.tensor([1.0, 2.0, 3.0]))
    y = owner.run("double", double, (x,), warmup=3)[0]
    assert y.tolist() == [2.0, 4.0, 6.0] and len(calls) == 4  # 3 warm-up runs + the capture
    x.copy_(torch.tensor([5.0, 6.0, 7.0]))
    y2 = owner.run("double", double, (x,))[0]
    assert y2 is y and y.tolist() == [10.0, 12.0, 14.0]  # the owner's output, replayed
    assert cache.captures == 1 and backend.captures == 1 and owner.graphs == ("double",)
    other = owner.run("neg", lambda t: (-t,), (x,))[0]
    assert y.tolist() == [10.0, 12.0, 14.0] and other.tolist() == [-5.0, -6.0, -7.0]


def test_a_graph_that_writes_its_input_warms_up_on_a_scratch_copy() -> None:
    owner = GraphCache(EagerGraphs(warmup=None)).owner("frame")
    frame = owner.buffer("frame", (2,), torch.float32)
    frame.zero_()

    def bump(f: torch.Tensor) -> tuple[torch.Tensor, ...]:
        f.add_(1)
        return ()

    owner.run("paste", bump, (frame,), mutates=0, warmup=3)
    assert frame.tolist() == [1.0, 1.0]  # written once (the replay), not by the warm-ups
    owner.run("paste", bump, (frame,), mutates=0)
    assert frame.tolist() == [2.0, 2.0]


def test_params_go_to_one_static_tensor_per_name() -> None:
    owner = _cache().owner("k")
    a = owner.params("affine", np.array([[1, 2, 3]], np.float32))
    b = owner.params("affine", np.array([[4, 5, 6]], np.float32))
    assert a is b and b.tolist() == [[4.0, 5.0, 6.0]]
    c = owner.params("affine", np.zeros((2, 3), np.float32))
    assert c is not a and c.shape == (2, 3)
    assert owner.params("ids", np.array([3, 4], np.int64)).dtype == torch.int64


def test_a_graph_left_reading_an_evicted_buffer_shows_up() -> None:
    """The stand-in catches the use-after-free pattern: a graph kept while the buffer it reads
    was freed replays on overwritten memory."""
    cache = _cache(max_owners=1)
    taps = cache.owner("taps").value("taps", lambda: _Taps(3))
    graphs = cache.owner("graphs")  # evicts "taps", overwriting its tensors
    x = graphs.buffer("x", (3,), torch.float32)
    x.fill_(1.0)
    out = graphs.run("g", lambda t: (t * taps.weight,), (x,))[0]
    assert out.tolist() == [77.0, 77.0, 77.0]


def test_bucket_and_ladder() -> None:
    steps = ladder(64, 4096, 1.25, 32)
    assert steps[0] == 64 and steps[-1] >= 4096
    assert all(b % 32 == 0 for b in steps)
    assert all(1.2 <= b / a <= 1.5 for a, b in itertools.pairwise(steps))
    assert bucket(1, steps) == 64 and bucket(64, steps) == 64 and bucket(65, steps) == 96
    assert bucket(steps[-1] + 1, steps) % steps[-1] == 0
    assert bucket(3, (1, 2, 4, 8)) == 4


def test_the_swapper_graphs_on_the_cpu(tmp_path: Path) -> None:
    """TorchRunner's graph path (one entry per batch size: the static input and its graph)
    equals its eager path, and a batch size is captured once."""
    from livefuse.models.inswapper_torch import load_inswapper_onnx
    from livefuse.models.torch_runner import TorchRunner
    from livefuse.testing.synthetic import build_synthetic_inswapper

    loaded = load_inswapper_onnx(build_synthetic_inswapper(tmp_path / "s.onnx", width=4))
    cache = _cache()
    graphed = TorchRunner(loaded, "cpu", "fp32", tf32=True, graphs=cache)
    eager = TorchRunner(loaded, "cpu", "fp32", tf32=True)
    latent = torch.nn.functional.normalize(torch.randn(1, 512), dim=1)
    for n in (1, 3, 1, 3):
        x = torch.rand(n, 3, 128, 128)
        torch.testing.assert_close(graphed.infer_tensor(x, latent).clone(),
                                   eager.infer_tensor(x, latent), atol=1e-5, rtol=0)
    assert cache.captures == 2 and set(cache.keys) == {1, 3}


@pytest.mark.parametrize("wh", [(1920, 1080), (1280, 720), (640, 480), (1080, 1920)])
def test_the_warm_up_sweep_meets_every_bucket(wh: tuple[int, int]) -> None:
    """The engine's warm-up pastes one square per paste-box bucket of the frame and tracks faces
    at every size the tracker rounds to a region size, so no later frame meets a new graph."""
    from livefuse.engine import _boxed, _face_sides, _warm_boxes, _warm_faces
    from livefuse.faces.insight import TRACK_CONTEXT
    from livefuse.faces.insight_torch import REGION_SIZES
    from livefuse.swap.gpu_frame import BOX_SIDES, paste_box
    from livefuse.swap.paste import patch_roi
    from livefuse.types import Patch

    w, h = wh
    patch = Patch(image=np.zeros((128, 128, 3), np.uint8), alpha=np.ones((128, 128), np.float32),
                  affine=np.eye(2, 3))
    swept = set()
    for side in _warm_boxes(w, h):
        moved = _boxed(patch, side, w, h)
        assert moved is not None
        swept.add(paste_box([patch_roi(moved.affine, (128, 128), (h, w, 3))], (w, h), True))
    every = {(min(b, w), min(b, h)) for b in BOX_SIDES}
    assert swept == every
    scale = min(640 / w, 640 / h)  # the detector's full-pass scale (det_size 640)
    met = {min(REGION_SIZES, key=lambda s, want=TRACK_CONTEXT * side * scale: abs(s - want))
           for side in _face_sides(h)}
    assert met == set(REGION_SIZES)
    faces = _warm_faces(4, 200.0, w, h)
    assert len(faces) == 4 and all(abs(f.width - 200.0) < 1e-3 for f in faces)


def test_a_warm_up_frees_what_an_earlier_one_froze() -> None:
    """An engine dropped after its warm-up froze it (a settings change) is freed by the next
    warm-up's collection, not kept with its VRAM until the process ends."""
    import gc
    import weakref

    from livefuse.engine import refreeze

    class Node:
        other: Node | None = None

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the collector frees it
    gone = weakref.ref(a)
    gc.freeze()
    try:
        del a, b
        refreeze()
        assert gone() is None
    finally:
        gc.unfreeze()


def test_the_current_stream_is_made_again_when_the_thread_changes_stream(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-thread stream cache of the live path (``current_stream``) hands back its object
    only while torch's raw current stream is the one it was made for: under a
    ``torch.cuda.stream`` context or a graph capture the raw id changes, and so must the object
    (a stale one would record events on the wrong stream). Driven on the CPU with torch's two
    calls stood in for."""
    import threading

    from livefuse.models import graph_cache

    raw = {"id": (7, 0, 1)}
    made: list[tuple[int, int, int]] = []

    class FakeStream:
        def __init__(self, ident: tuple[int, int, int]) -> None:
            self.ident = ident

    def public(index: int) -> FakeStream:
        made.append(raw["id"])
        return FakeStream(raw["id"])

    monkeypatch.setattr(torch._C, "_cuda_getCurrentStream", lambda i: raw["id"], raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", public)
    monkeypatch.setattr(graph_cache, "_WAIT", threading.local())

    first = graph_cache.current_stream(0)
    assert graph_cache.current_stream(0) is first and len(made) == 1
    raw["id"] = (9, 0, 1)  # e.g. inside torch.cuda.stream(side)
    side = graph_cache.current_stream(0)
    assert side is not first and side.ident == (9, 0, 1)
    raw["id"] = (7, 0, 1)
    assert graph_cache.current_stream(0).ident == (7, 0, 1)
    # another thread has its own current stream, so its own cache
    other: list[FakeStream] = []
    t = threading.Thread(target=lambda: other.append(graph_cache.current_stream(0)))
    t.start()
    t.join()
    assert other[0] is not first and len(made) == 4
    # without torch's raw binding nothing is cached: each call asks torch
    monkeypatch.setattr(torch._C, "_cuda_getCurrentStream", None, raising=False)
    n = len(made)
    graph_cache.current_stream(0)
    graph_cache.current_stream(0)
    assert len(made) == n + 2
