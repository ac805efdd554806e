"""Model files: the catalog, downloading and verifying them (and, elsewhere in this package, the
onnxruntime sessions and the torch port of the swapper)."""
