"""Sources and sinks: video files, still images, cameras, virtual cameras."""
