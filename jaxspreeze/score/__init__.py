"""The time-to-score yardstick (``jaxspreeze score``): rows, sides, runs, reports."""
