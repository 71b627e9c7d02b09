"""The Craftax family: ``craftax/<Id>`` (Craftax and Craftax-Classic, symbolic or pixels).

Craftax (``pip install "jaxspreeze[craftax]"``) steps gymnax's classic five values. Its
default env resets by itself the way gymnax's old base class does: every step computes a
reset too and keeps it where the episode ended, and under ``vmap`` that builds a whole new
world (the costly part of Craftax) on every step of every env: about 300 env steps/s on a
2-core CPU against 5.3k without it. The published practice (Craftax_Baselines' optimistic
resets, purejaxql) builds the env with ``auto_reset=False`` and resets it apart; so does
this adapter.

**The reset policy.** The env is built with ``auto_reset=False`` and reset by
:func:`~jaxspreeze.envs.base.auto_reset`: each env holds a start (a world generated
ahead, with its observation), and an episode that ends continues from it; each step
generates new worlds for one block of ``ceil(N / 64)`` envs (:data:`REFRESH_EVERY`), the
blocks in turn, so every env's start is at most 64 steps old and a step costs
``ceil(N / 64)`` world generations, not ``N`` (Craftax_Baselines'
``OptimisticResetVecEnvWrapper`` generates ``N / 16`` per step and hands them to the envs
that end). Craftax episodes run for hundreds of steps, so nearly every episode starts from
a world never played before; one shorter than 64 steps may start from its env's previous
world. The observation the last
action led to is kept as the final observation (bootstrapping). The auto-reset runs in its
lean order (``lean=True``: the start selected at the next step, inside the step's own
kernels; the worlds' keys hashed unrolled through the whole generation, the same keys and
the same random bits as JAX's own; the generation's float noise may still round otherwise
in a few tiles, as it does between any two programs: the adapter's test allows 1% of
tiles).

**What a step costs.** Generating one world costs about 0.4 of a 64-env step on a CPU
(2 ms against 5.3 ms), and each step generates ``ceil(N / 64)``: without the worlds the
adapter steps at 0.96-0.99 of the bare transition, with them at about 0.7
(``experiments/results/suites_cpu.md``). Fewer worlds per step cannot keep episodes
apart: with episodes of ~150 steps, ``N / 150`` episodes end per step, so a world for
every episode costs at least ``(2 / 150) / (5.3 / 64)``, 0.16 of a step, at any ``N``, and
fewer than one world per episode means that episodes share worlds.

A step's randomness (mobs, damage) comes from a key carried in each env's state, drawn at
its reset. Death (and lava in Classic, the final boss beaten in Craftax) is a termination;
the step limit (``max_timesteps``: 10,000 steps in Classic, 100,000 in Craftax) a
truncation. Observations keep their own dtype (``float32``: the symbolic vector, or the
pixels in [0, 1]).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.core.errors import UnknownEnvError
from jaxspreeze.core.types import EnvSpec, keep_obs
from jaxspreeze.envs.base import EnvParts, auto_reset

PREFIX = "craftax"
INSTALL = 'pip install "jaxspreeze[craftax]"'
# craftax.craftax_env.make_craftax_env_from_name's ids (craftax 1.x)
NAMES = (
    "Craftax-Classic-Symbolic-v1",
    "Craftax-Classic-Pixels-v1",
    "Craftax-Symbolic-v1",
    "Craftax-Pixels-v1",
)
# steps between two worlds generated for each env's next episode (the shared auto-reset's
# refresh_every): Craftax episodes run for hundreds of steps, so a world drawn within the
# last 64 steps is still one never played, at a quarter of the generations of 16
REFRESH_EVERY = 64
NO_LIMIT = 2**31 - 1  # max_timesteps that never ends an episode: what is left is a termination
BLOCK_PIXELS = 16  # pixels per block of a rendered frame (Craftax's BLOCK_PIXEL_SIZE_IMG)


def installed() -> bool:
    """Whether ``craftax`` can be imported (without importing it)."""
    return importlib.util.find_spec("craftax") is not None


def _craftax_env() -> Any:
    """``craftax.craftax_env``, or the error that gives the install command."""
    if not installed():
        raise UnknownEnvError(
            f"{PREFIX}/ environments need Craftax, which is not installed: {INSTALL}"
        )
    return _import()


@functools.cache
def _import() -> Any:
    import craftax.craftax_env  # lazy: optional

    return craftax.craftax_env


def names() -> tuple[str, ...]:
    """The Craftax ids (without the prefix); ``()`` when not installed."""
    return NAMES if installed() else ()


def check(env_name: str) -> None:
    """Raise :class:`UnknownEnvError` unless Craftax is installed (else its install
    command) and ``env_name`` is one of :data:`NAMES` (else the nearest ones)."""
    _craftax_env()
    if env_name not in NAMES:
        lower = {n.lower(): n for n in NAMES}
        near = [lower[n] for n in difflib.get_close_matches(env_name.lower(), lower, n=3)]
        hint = f"did you mean {', '.join(f'{PREFIX}/{n}' for n in near)}? " if near else ""
        raise UnknownEnvError(
            f"unknown environment {f'{PREFIX}/{env_name}'!r}; {hint}Craftax ids: "
            + ", ".join(f"{PREFIX}/{n}" for n in NAMES)
        )


def load_env(env_name: str) -> Any:
    """Craftax's own env for ``env_name``, built with ``auto_reset=False``, after
    :func:`check`."""
    check(env_name)
    return _craftax_env().make_craftax_env_from_name(env_name, auto_reset=False)


def _raw_key(key: jax.Array) -> jax.Array:
    """The key as its ``uint32`` data (a typed key unwrapped), to be carried in a state
    that :func:`~jaxspreeze.envs.base.auto_reset` selects with ``jnp.where``."""
    return jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key


def _strong(tree: Any) -> Any:
    """``tree`` with no weak-typed leaf (a reset's Python scalars are weak, a step's are not:
    the state a program takes must be the state it returns)."""
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.result_type(x)), tree)


def make(env_name: str) -> EnvParts:
    """The spec and per-env functions of ``craftax/<env_name>`` (the reset policy: the
    module's docstring)."""
    env = load_env(env_name)
    params = env.default_params
    unlimited = params.replace(max_timesteps=NO_LIMIT)
    max_steps = int(params.max_timesteps)

    def reset(key):
        # the key as given through the world's generation (the shared auto-reset's draws
        # hash a typed key's splits unrolled: the same bits, fewer kernels on a CPU), raw
        # keys in the state it returns (ours, and Craftax's state_rng), as the step's are
        k_world, k_steps = jax.random.split(key)
        obs, state = env.reset(k_world, params)
        return keep_obs(obs), _strong(jax.tree.map(_raw_key, (state, k_steps)))

    def step(inner, action):
        state, key = inner
        key, k_step = jax.random.split(key)
        obs, state, reward, done, _ = env.step(k_step, state, action, params)
        terminated = env.is_terminal(state, unlimited)
        truncated = jnp.asarray(done, bool) & ~terminated
        return keep_obs(obs), (state, key), jnp.asarray(reward, jnp.float32), terminated, truncated

    obs = jax.eval_shape(reset, jax.random.key(0))[0]
    spec = EnvSpec(
        f"{PREFIX}/{env_name}",
        tuple(obs.shape),
        True,
        int(env.action_space(params).n),
        max_episode_steps=max_steps,
        obs_dtype=str(obs.dtype),
    )
    made = auto_reset(reset, step, max_steps, REFRESH_EVERY, lean=True)
    return EnvParts(spec, made.reset_one, made.step_batch, (env, params), made.step_batch_no_reset)


def frames(render_state: Any, states: Any) -> np.ndarray:
    """The RGB frames ``[T, H, W, 3]`` (uint8) of the adapter's states stacked ``[T, ...]``
    (``(Craftax's state, key)``), drawn by Craftax's own pixel renderer
    (``make_craftax_pixel_renderer``, Classic's or Craftax's, :data:`BLOCK_PIXELS` a block):
    the agent's view and its inventory, as the game's window shows them."""
    env, _ = render_state
    classic = type(env).__module__.startswith("craftax.craftax_classic")
    renderer = importlib.import_module(
        "craftax.craftax_classic.renderer" if classic else "craftax.craftax.renderer"
    )
    draw = renderer.make_craftax_pixel_renderer(BLOCK_PIXELS)
    pixels = jax.jit(jax.vmap(draw))(states[0])  # floats in [0, 255]
    return np.asarray(jnp.clip(jnp.round(pixels), 0, 255).astype(jnp.uint8))
