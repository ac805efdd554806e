from livefuse.cli import entry

entry()
