"""Face detection, landmarks, recognition and selection."""
