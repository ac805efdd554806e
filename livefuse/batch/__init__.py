"""``livefuse batch``: folders of images and videos, and long videos cut into chunks, across
workers (design.md §8).

* :mod:`~livefuse.batch.plan` turns inputs into items (one output each) and work units (an
  image, a video, or a keyframe-aligned chunk of one); it knows nothing of Ray.
* :mod:`~livefuse.batch.worker` turns one unit into one output file with the code ``livefuse run``
  uses (the pipelined video path), keeping its engine and models between units.
* :mod:`~livefuse.batch.dispatch` hands units to idle workers, holding back any GPU above the
  85 % VRAM guard, and collects results as they finish.
* :mod:`~livefuse.batch.executor` is the only module that imports Ray: Ray actors as workers
  (an embedded local cluster, or one joined with ``--address``), or worker threads in this
  process without Ray.
* :mod:`~livefuse.batch.join` joins a video's chunks by stream copy and copies its audio from the
  input, byte for byte.
* :mod:`~livefuse.batch.runner` drives the whole batch: plan, dispatch, join, progress, summary,
  clean-up on Ctrl-C.
"""
