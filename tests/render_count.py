"""Counting an engine's swaps: a feature that skips them (``Engine.track``) is seen to."""

from __future__ import annotations

from typing import Any


class RenderCount:
    """Wraps ``engine.renderer.render``; :attr:`n` is how many times it ran since."""

    def __init__(self, engine: Any) -> None:
        self.n = 0
        render = engine.renderer.render

        def counted(*args: Any, **kw: Any) -> Any:
            self.n += 1
            return render(*args, **kw)

        engine.renderer.render = counted
