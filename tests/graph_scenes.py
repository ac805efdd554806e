"""Scenes shared by the CPU tests of the graph cache and their GPU twins."""

from __future__ import annotations

import numpy as np
import torch

from livefuse.faces.align import arcface_affine
from livefuse.models.graph_cache import GraphCache
from livefuse.swap.gpu_frame import align_crops, paste_patches
from livefuse.swap.paste import feather_mask
from livefuse.testing.synthetic import face_kps
from livefuse.types import Patch


def align_and_paste_scene(cache: GraphCache, device: str) -> None:
    """Faces that move, grow, overlap and leave the frame, aligned and pasted through one frame
    size's graph-cache entry (its static work frame): exactly what the eager functions write,
    with graphs captured once and replayed as the faces move and grow."""
    rng = np.random.default_rng(7)
    base = torch.from_numpy(rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8)).to(device)
    owner = cache.owner(tuple(base.shape))
    work = owner.buffer("frame", tuple(base.shape), torch.uint8)
    mask = torch.from_numpy(np.array(feather_mask(128))).to(device)
    calls = 0
    for step in range(6):
        affines = [arcface_affine(face_kps(300 + 7 * step, 300, 60 + 3 * step, 2.0 * step)),
                   arcface_affine(face_kps(340 + 5 * step, 330, 70, -10.0)),  # overlaps
                   arcface_affine(face_kps(1270, 700 - step, 50, 0.0))]  # partly outside
        work.copy_(base)
        crops_g = align_crops(work, affines, graphs=owner).clone()
        torch.testing.assert_close(crops_g, align_crops(base, affines), atol=0, rtol=0)
        patches = [Patch(image=torch.rand(3, 128, 128, device=device).half(), alpha=mask,
                         affine=m) for m in affines]
        eager = base.clone()
        rois = paste_patches(eager, patches)
        assert paste_patches(work, patches, graphs=owner) == rois
        calls += 2
        assert torch.equal(work, eager), step
    assert cache.captures < calls  # moving faces replayed graphs already captured


def cached_patch_scene(cache: GraphCache, device: str) -> list[bool]:
    """A cached patch pasted again and again as its face moves (a cache hit: the same tensors
    with a new affine), then written in place, then another patch of the same size, then the
    first again: every paste through the graph equals the eager paste. Returns, per paste,
    whether it filled the paste's static buffers (``torch.stack`` into them)."""
    from livefuse.swap.paste import rewarp

    rng = np.random.default_rng(3)
    base = torch.from_numpy(rng.integers(0, 256, (360, 640, 3), dtype=np.uint8)).to(device)
    owner = cache.owner(tuple(base.shape))
    work = owner.buffer("frame", tuple(base.shape), torch.uint8)
    mask = torch.from_numpy(np.array(feather_mask(128))).to(device)
    kps = face_kps(300, 180, 60)
    cached = Patch(image=torch.rand(3, 128, 128, device=device), alpha=mask,
                   affine=arcface_affine(kps))
    other = Patch(image=torch.rand(3, 128, 128, device=device), alpha=mask.clone(),
                  affine=cached.affine)
    fills: list[bool] = []
    real_stack = torch.stack

    def paste(patch: Patch) -> None:
        filled = []

        def counting(*a: object, **k: object) -> torch.Tensor:
            filled.append("out" in k)
            return real_stack(*a, **k)  # type: ignore[arg-type]

        eager = base.clone()
        rois = paste_patches(eager, [patch])
        work.copy_(base)
        torch.stack = counting  # type: ignore[assignment]
        try:
            assert paste_patches(work, [patch], graphs=owner) == rois
        finally:
            torch.stack = real_stack
        assert torch.equal(work, eager), len(fills)
        fills.append(any(filled))

    for step in range(4):  # the face moves: hits re-warp the same tensors
        paste(rewarp(cached, kps, kps + 3.0 * step))
    cached.image.mul_(0.5)  # written in place: its version moves
    paste(cached)
    paste(other)
    paste(cached)
    return fills
