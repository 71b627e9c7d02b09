"""What a run keeps on disk: checkpoints, the run directory, where a resume continues."""
