"""The GPU frame path on CPU tensors: what CI can run of it without a GPU."""

from __future__ import annotations

from livefuse.engine import Engine
from livefuse.swap.frame_path import DevicePath
from livefuse.swap.gpu_frame import TensorStager
from livefuse.swap.neural_engine import NeuralRenderer


def cpu_device_path(engine: Engine) -> Engine:
    """``engine`` (neural, torch backend on the CPU, no masks) switched to the device forms of
    its stages: frames staged as CPU tensors into a work frame per size, align and paste through
    the graph cache on :class:`~livefuse.models.graph_cache.EagerGraphs`, the deferred guards."""
    r = engine.renderer
    assert isinstance(r, NeuralRenderer)
    engine.renderer = NeuralRenderer(r.swapper, r.analyser, r.pixel_boost, r.masker,
                                     on_device=True)
    engine.path = DevicePath(stager=TensorStager("cpu"))
    engine.stager = engine.path.stager
    return engine
