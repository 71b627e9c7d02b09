"""A trained agent to act with: ``agent = jaxspreeze.load(path)``, ``agent.predict(obs)``.

::

    agent = jaxspreeze.load("runs/sac-gymnax-Pendulum-v1-...")   # or a policy file
    action = agent.predict(obs)                   # numpy in, numpy out; one obs or a batch
    action, state = agent.predict(obs, state, episode_start)   # a policy with memory
    agent.evaluate("gymnax/Pendulum-v1", episodes=10)   # any family, or a gymnasium env
    agent.save("pendulum.msgpack")                # one file: config and actor

The agent is the policy of one seed of a run (:mod:`jaxspreeze.agent.policy`): its algorithm's
``act``, jitted once, with the observation normalisation and the action scaling the run
trained with inside it. Observations are what the run's env observes (``make_env(env, n,
obs_keys)``; for asymmetric observation keys the whole row, the actor reads its columns);
actions are in the env's units (discrete: an int index; continuous: inside the bounds).
A policy with memory (a recurrent one: its algorithm's carry is not empty,
:attr:`Agent.has_memory`) follows Stable-Baselines3's convention: ``predict`` takes the
state it returned last and ``episode_start`` (a bool per row) and returns ``(action,
state)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxspreeze.agent.evaluate import make_evaluate, make_host_evaluate
from jaxspreeze.agent.policy import Policy, load_policy, save_policy_file
from jaxspreeze.core.types import DEFAULT_OBS_KEYS, Carry, EnvSpec
from jaxspreeze.envs import env_spec, is_host_env, load_env_record, make_env, register_env
from jaxspreeze.host import hostenvs


class Evaluation(NamedTuple):
    """Deterministic episodes' return (mean, std over episodes) and mean length."""

    return_mean: float
    return_std: float
    length_mean: float
    episodes: int


def load(path: str | Path, seed_index: int | None = None, *, env: Any = None) -> Agent:
    """The agent of a finished run directory or a policy file (``Agent.save``'s or a run's
    ``policy.msgpack``); ``seed_index`` picks the seed of a multi-seed run (default: the
    file's, 0 for a run).

    A run trained on your own env (``jaxspreeze.train(cfg, env=...)``) loads from its run
    directory's record of the env: ``predict`` works at once; evaluating or rendering it
    by name needs the env, passed again as ``env`` (an instance, a factory or a vector
    env, as for ``train``; also what a standalone policy file of such a run needs). A
    JAX env object (``jax/<ClassName>``) likewise: ``load(run, env=obj)``, then
    ``agent.evaluate(agent.cfg.env)`` steps it on the device.
    """
    if env is not None:
        register_env(env)
    run_dir = Path(path) if Path(path).is_dir() else Path(path).parent
    load_env_record(run_dir)
    policy = load_policy(path)
    return Agent(policy, policy.seed_index if seed_index is None else seed_index)


class Agent:
    """The policy of seed ``seed_index`` of ``policy``: predict, evaluate, save."""

    def __init__(self, policy: Policy, seed_index: int = 0):
        if not 0 <= seed_index < policy.cfg.slots:
            raise ValueError(
                f"seed index {seed_index} out of range: the run has {policy.cfg.slots} seed(s)"
            )
        self.policy = policy
        self.seed_index = seed_index
        self.cfg = policy.cfg
        self.spec: EnvSpec = env_spec(policy.cfg.env, policy.cfg.obs_keys)
        self.actor = jax.tree.map(jnp.asarray, policy.seed(seed_index))
        self._act = jax.jit(policy.algo.act, static_argnums=4)
        self._start = jax.jit(policy.algo.start_rows)
        self._key = jax.random.key(0)
        self.has_memory = policy.algo.has_memory  # predict takes and returns its state

    def __repr__(self) -> str:
        return f"Agent({self.cfg.algo} on {self.cfg.env}, seed {self.seed_index})"

    # ------------------------------------------------------------------------- acting
    def predict(
        self,
        obs: Any,
        state: Carry | None = None,
        episode_start: Any = None,
        deterministic: bool = True,
        key: jax.Array | int | None = None,
    ) -> Any:
        """The action for one observation ``obs_shape`` or a batch ``[B, *obs_shape]``.

        numpy (or anything array-like) in, numpy out: ``[]`` / ``[B]`` int actions for a
        discrete env, ``[d]`` / ``[B, d]`` floats within the bounds for a continuous one.
        ``deterministic=False`` samples (``key``: a JAX key or an int seed; none given, the
        agent's own key advances on every call).

        A policy without memory returns the action alone (``state`` and ``episode_start``
        are unused). A policy with memory (:attr:`has_memory`) returns ``(action, state)``,
        Stable-Baselines3's convention: pass the returned ``state`` back with the next
        observation (None: every row starts an episode), and ``episode_start`` (a bool, or
        one per row of a batch; None: no row starts one) where a row's observation is the
        first of an episode (after a reset, a termination or a truncation), so its state
        restarts. ``state`` is a PyTree of numpy arrays ``[B, ...]`` (``B = 1`` for one
        observation).
        """
        x = np.asarray(obs, self.spec.obs_dtype)  # the dtype the run trained on
        shape = self.spec.obs_shape
        single = x.shape == shape
        if single:
            x = x[None]
        elif x.shape[1:] != shape or x.ndim != len(shape) + 1:
            raise ValueError(
                f"observation of shape {np.shape(obs)}; {self.spec.name} observes {shape} "
                f"(one) or [B, {', '.join(map(str, shape))}] (a batch)"
            )
        if key is None:
            if deterministic:
                key = self._key
            else:
                self._key, key = jax.random.split(self._key)
        elif isinstance(key, int):
            key = jax.random.key(key)
        empty = x.shape[0] == 0  # an empty batch: act on one zero row, return none
        if empty:
            x, state, episode_start = np.zeros((1, *shape), np.float32), None, None
        carry = self._carry(x.shape[0], state, episode_start)
        action, carry = self._act(self.actor, carry, x, key, bool(deterministic))
        action = np.asarray(action)
        action = action[0] if single else action
        if empty:
            action, carry = action[:0], jax.tree.map(lambda leaf: leaf[:0], carry)
        return (action, jax.device_get(carry)) if self.has_memory else action

    def _carry(self, batch: int, state: Carry | None, episode_start: Any) -> Carry:
        """The carry to act with: ``state`` (or the initial one) reset where episodes start."""
        if not self.has_memory or state is None:
            return self.policy.algo.initial_carry(batch)
        rows = {np.shape(leaf)[0] for leaf in jax.tree.leaves(state)}
        if rows != {batch}:
            raise ValueError(
                f"state holds {sorted(rows)} rows for {batch} observation(s): pass the state "
                "predict returned for the same batch (or None to start afresh)"
            )
        if episode_start is None:
            return state
        starts = np.broadcast_to(np.asarray(episode_start, bool).reshape(-1), (batch,))
        return self._start(state, starts)

    # --------------------------------------------------------------------- evaluating
    def evaluate(
        self, env: Any, episodes: int = 10, *, seed: int = 0, max_steps: int | None = None
    ) -> Evaluation:
        """Mean and std of the return of ``episodes`` deterministic episodes.

        ``env`` is an env id of any family (``gymnax/...``, ``brax/...``,
        ``playground/...``, ``gymnasium/...``, ``envpool/...``) or a ``gymnasium.Env``
        instance, whose observation and action spaces must be the run's env's (same
        shapes, same action bounds). ``max_steps`` caps an episode (default: the env's
        time limit).
        """
        if episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {episodes}")
        if not isinstance(env, str):
            return self._evaluate_gymnasium(env, episodes, seed, max_steps)
        keys = self.cfg.obs_keys if env == self.cfg.env else DEFAULT_OBS_KEYS
        self._check_spec(env_spec(env, keys))
        actor = jax.tree.map(lambda x: x[None], self.actor)
        if is_host_env(env):
            res = make_host_evaluate(self.policy.algo, env, episodes, seed, max_steps)(actor)
        else:
            fn = make_evaluate(self.policy.algo, make_env(env, episodes, keys), max_steps, True)
            res = jax.jit(fn)(actor, jax.random.key(seed)[None])
        mean, std, length = (float(np.asarray(x)[0]) for x in res[:3])
        return Evaluation(mean, std, length, episodes)

    def _evaluate_gymnasium(
        self, env: Any, episodes: int, seed: int, max_steps: int | None
    ) -> Evaluation:
        """Episodes one after another in one ``gymnasium.Env`` (reset with ``seed + j``)."""
        gym = hostenvs._import_gymnasium()
        if not isinstance(env, gym.Env):
            raise TypeError(f"env must be an env id or a gymnasium.Env; got {type(env).__name__}")
        name = f"gymnasium/{type(env.unwrapped).__name__}"
        spec = hostenvs._spec_from_spaces(name, env.observation_space, env.action_space, None)
        self._check_spec(spec)
        to_env = hostenvs._Actions(spec, env.action_space)
        limit = getattr(getattr(env, "spec", None), "max_episode_steps", None)
        steps = max_steps or limit or self.spec.max_episode_steps
        returns, lengths = [], []
        for j in range(episodes):
            obs, _ = env.reset(seed=seed + j)
            ret, n, state = 0.0, 0, None  # (a policy with memory starts each episode afresh)
            while n < steps:
                out = self.predict(np.asarray(obs).reshape(spec.obs_shape), state)
                action, state = out if self.has_memory else (out, None)
                obs, reward, terminated, truncated, _ = env.step(to_env(action[None])[0])
                ret, n = ret + float(reward), n + 1
                if terminated or truncated:
                    break
            returns.append(ret)
            lengths.append(n)
        r = np.asarray(returns)
        return Evaluation(float(r.mean()), float(r.std()), float(np.mean(lengths)), episodes)

    def _check_spec(self, spec: EnvSpec) -> None:
        """ValueError unless ``spec``'s observations and actions are the run's env's."""
        mine = self.spec
        why = ""
        if spec.obs_shape != mine.obs_shape:
            why = f"observes {spec.obs_shape}, the policy reads {mine.obs_shape}"
        elif spec.discrete != mine.discrete or spec.action_dim != mine.action_dim:
            kinds = [
                f"{'discrete' if s.discrete else 'continuous'} {s.action_dim}" for s in (spec, mine)
            ]
            why = f"takes {kinds[0]} actions, the policy gives {kinds[1]}"
        elif not spec.discrete and not (
            np.allclose(spec.action_low, mine.action_low)
            and np.allclose(spec.action_high, mine.action_high)
        ):
            why = (
                f"has action bounds {spec.action_low}..{spec.action_high}, the policy was "
                f"trained for {mine.action_low}..{mine.action_high}"
            )
        if why:
            raise ValueError(f"{spec.name} does not fit the agent trained on {mine.name}: {why}")

    # ------------------------------------------------------------------------- saving
    def save(self, path: str | Path) -> Path:
        """Write one standalone policy file (the run's config and actor) that :func:`load`
        reads back, acting with this agent's seed; returns the path."""
        return save_policy_file(path, self.policy, self.seed_index)
