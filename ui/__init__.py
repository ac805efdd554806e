"""livefuse's PySide6 desktop app (installed as ``livefuse_ui``). Built in the desktop-app issue."""
