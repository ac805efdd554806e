"""Test and benchmark equipment, not the product.

Same-architecture replicas of the released models with seeded random weights (no machine that
runs livefuse's tests or benchmarks can download the real weights), exported to ONNX so that
livefuse loads them exactly as it loads the user's files. Nothing in the engine imports this
package; the test suite (``tests/``) and ``benchmarks/`` do.
"""
