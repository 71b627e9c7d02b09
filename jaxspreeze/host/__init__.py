"""Host simulators (gymnasium, envpool) and the sampling threads that step them."""
