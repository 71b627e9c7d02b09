"""Env ids known without importing a simulator (or JAX): a leaf that the env families and
the command line's early checks (:mod:`jaxspreeze.cli.fastcheck`) both read."""

from __future__ import annotations

# jaxspreeze's brax tasks (jaxspreeze.envs.brax builds each with brax.envs.get_environment)
BRAX_NAMES = (
    "ant",
    "fast",
    "halfcheetah",
    "hopper",
    "humanoid",
    "humanoidstandup",
    "inverted_pendulum",
    "inverted_double_pendulum",
    "pusher",
    "reacher",
    "swimmer",
    "walker2d",
)
