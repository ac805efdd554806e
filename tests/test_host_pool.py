"""The lent host buffers a capture writes frames into (issue 17, the host's frame copy): when a
buffer may be lent again, and that the stager uploads from one without a copy. The pinned,
CUDA form shares this code; these run it on plain host tensors."""

from __future__ import annotations

import gc

import numpy as np
import torch

from livefuse.io.sources import FramesSource
from livefuse.swap.gpu_frame import TensorStager
from livefuse.swap.host_pool import HostBufferPool

SHAPE = (6, 8, 3)


def _pool(limit: int = 3) -> HostBufferPool:
    return HostBufferPool(lambda shape: torch.empty(shape, dtype=torch.uint8), limit)


class _Upload:
    """An upload event that completes when told."""

    def __init__(self) -> None:
        self.done = False

    def query(self) -> bool:
        return self.done


def test_a_buffer_is_lent_again_only_when_no_array_or_view_of_it_is_left() -> None:
    pool = _pool()
    a = pool.lend(SHAPE)
    assert a is not None and a.shape == SHAPE and a.dtype == np.uint8
    address = a.ctypes.data
    view = a[1:3]
    del a
    gc.collect()
    b = pool.lend(SHAPE)
    assert b is not None and b.ctypes.data != address  # the view still holds the first one
    del view, b
    gc.collect()
    c = pool.lend(SHAPE)
    assert c is not None and c.ctypes.data == address
    assert len(pool) == 2


def test_a_buffer_is_not_lent_again_before_its_upload_has_read_it() -> None:
    pool = _pool()
    a = pool.lend(SHAPE)
    assert a is not None
    address = a.ctypes.data
    owner = pool.owner(a)
    assert owner is not None
    upload = _Upload()
    owner.uploaded = upload
    del a
    gc.collect()
    b = pool.lend(SHAPE)
    assert b is not None and b.ctypes.data != address
    del b
    upload.done = True
    gc.collect()
    kept = [pool.lend(SHAPE) for _ in range(2)]
    addresses = {k.ctypes.data for k in kept if k is not None}
    assert address in addresses


def test_past_the_limit_lend_says_none_and_sizes_are_pooled_apart() -> None:
    pool = _pool(limit=2)
    held = [pool.lend(SHAPE), pool.lend(SHAPE)]
    assert all(h is not None for h in held)
    assert pool.lend(SHAPE) is None and pool.refused == 1
    assert pool.lend((4, 4, 3)) is not None


def test_only_the_lent_array_itself_is_recognised() -> None:
    pool = _pool()
    a = pool.lend(SHAPE)
    assert a is not None
    assert pool.owner(a) is not None
    assert pool.owner(a[:]) is None  # a view: its user may have written elsewhere
    assert pool.owner(a.copy()) is None
    assert pool.owner(np.zeros(SHAPE, np.uint8)) is None


def test_the_stager_uploads_a_lent_frame_without_a_copy_and_copies_any_other() -> None:
    stager = TensorStager("cpu")
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 255, SHAPE, dtype=np.uint8)
    lent = stager.lend(SHAPE)
    assert lent is not None
    lent[:] = frame
    staged = stager.stage(lent)
    assert stager.copies == 0
    assert staged.host is lent
    np.testing.assert_array_equal(staged.device.numpy(), frame)
    lent[:] = 0  # the device copy is its own memory
    np.testing.assert_array_equal(staged.device.numpy(), frame)
    stager.stage(frame.copy())
    assert stager.copies == 1


def test_a_copying_source_writes_into_the_buffer_it_is_given() -> None:
    frames = [np.full(SHAPE, v, np.uint8) for v in (10, 20)]
    src = FramesSource(frames)
    out = np.zeros(SHAPE, np.uint8)
    got = src.read(out)
    assert got is out and int(out[0, 0, 0]) == 10
    other = src.read(np.zeros((2, 2, 3), np.uint8))  # the wrong size: its own array
    assert other is not None and other.shape == SHAPE and int(other[0, 0, 0]) == 20
