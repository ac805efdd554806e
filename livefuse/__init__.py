"""livefuse: real-time face swap for streamers. The engine; it never imports Qt."""

__version__ = "0.1.0"
