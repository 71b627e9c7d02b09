"""One run, wired: set up, start, the chunk loop and its threads, faults, the summary."""
