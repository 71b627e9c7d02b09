"""Run setup: the config, the plan, the devices and processes, a population, the
memory estimate."""
