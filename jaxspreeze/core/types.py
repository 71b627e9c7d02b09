"""The shared vocabulary: transitions, environment specs, device placements, records, sinks."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

PyTree = Any
Record = dict[str, Any]  # one JSON-able row: a chunk, an evaluation, a summary
Carry = Any  # a policy's state between steps: a PyTree, every leaf [N, ...]; () for none


def reset_carry(carry: Carry, initial: Carry, starts: Any) -> Carry:
    """``carry`` with the rows where ``starts [N]`` (bool: an episode starts there) set to
    ``initial``'s rows (a policy's initial carry for the same ``N``).

    Numpy in (every leaf and ``starts``), numpy out, for host loops; JAX arrays (traced or
    not) otherwise. An empty carry (``()``) is returned as it is: no op."""

    def reset(c: Any, i: Any) -> Any:
        host = isinstance(c, np.ndarray) and isinstance(i, np.ndarray)
        xp = np if host and isinstance(starts, np.ndarray) else jnp
        mask = starts.reshape(starts.shape + (1,) * (c.ndim - starts.ndim))
        return xp.where(mask, i, c)

    return jax.tree.map(reset, carry, initial)


class Transition(NamedTuple):
    """One step of experience; in a rollout every leaf is shaped ``[T, N, ...]``.

    ``next_obs`` is the observation the action led to: on an episode end it is the
    final observation before the auto-reset, so a truncated step can bootstrap from it.
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_obs: jax.Array


class ObsOnly(NamedTuple):
    """What the actor side keeps of a transition: the policy loss needs states only."""

    obs: jax.Array


Columns = tuple[int, int]  # [start, stop) of an observation flattened to one vector


@dataclass(frozen=True)
class EnvSpec:
    """Static description of an environment: shapes, action space and time limit.

    ``actor_obs`` / ``critic_obs`` are the columns of the flattened observation that the
    actor (the policy) and the critic (Q or value network) read; None: all of them. They
    differ only for asymmetric observations (:class:`ObsKeys`): the observation is then
    the actor's part followed by the critic's, and the networks slice their own columns.
    """

    name: str
    obs_shape: tuple[int, ...]
    discrete: bool
    action_dim: int  # continuous: size of the action vector; discrete: number of actions
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    max_episode_steps: int = 1000
    actor_obs: Columns | None = None
    critic_obs: Columns | None = None
    # the dtype observations are kept in (env output, replay, rollouts, transfers): a
    # numpy dtype name ("float32", "uint8", "bool"); the networks widen at their input
    obs_dtype: str = "float32"
    # discrete actions only: whether the env says which actions are legal in each state
    action_mask: bool = False

    @classmethod
    def from_record(cls, raw: dict[str, Any]) -> EnvSpec:
        """The spec a run directory recorded (``dataclasses.asdict`` read back from JSON:
        lists become tuples; fields it does not know, and the observation columns, which
        follow from the run's keys, are left out)."""
        known = {f.name for f in fields(cls)} - {"actor_obs", "critic_obs"}
        return cls(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items() if k in known}
        )

    @property
    def action_shape(self) -> tuple[int, ...]:
        """Shape of one action: ``()`` for discrete actions, ``(action_dim,)`` otherwise."""
        return () if self.discrete else (self.action_dim,)


@dataclass(frozen=True)
class ObsKeys:
    """The keys of a dict observation the actor and the critic read; '' leaves the default.

    The default actor key is the family's (Playground: ``state``); the default critic key
    is the actor's. Only families whose envs observe dicts accept keys.
    """

    actor: str = ""
    critic: str = ""

    @property
    def given(self) -> bool:
        """True when either key was set."""
        return bool(self.actor or self.critic)


DEFAULT_OBS_KEYS = ObsKeys()  # neither key set: the family's default observation


DATA_AXIS = "data"  # the mesh axis a data-parallel placement shards envs and replay over


@dataclass(frozen=True)
class Placement:
    """Devices for the actor side (envs, policy, obs buffer), critic side (buffer) and eval.

    ``mesh`` (data parallelism): every device of every process along the ``"data"`` axis;
    each steps its own envs and keeps its own replay shard. ``actor``, ``critic`` and
    ``eval`` are then this process's first device (where its evaluator runs).

    ``critic_mesh`` (the split composed with data parallelism, ``split-data``): ``mesh``
    holds the k actor-side devices and ``critic_mesh`` the k critic-side ones, device i of
    one paired with device i of the other (in the same process); ``actor``/``eval`` and
    ``critic`` are this process's first device of each.
    """

    actor: jax.Device
    critic: jax.Device
    eval: jax.Device
    mesh: jax.sharding.Mesh | None = None
    critic_mesh: jax.sharding.Mesh | None = None

    @property
    def split(self) -> bool:
        """True when the actor and the critic live on different devices."""
        return self.actor != self.critic

    @property
    def on_cpu(self) -> bool:
        """True when every side (actor, critic, evaluation) is a CPU device."""
        sides = (self.actor, self.critic, self.eval)
        return all(getattr(d, "platform", None) == "cpu" for d in sides)

    @property
    def data_parallel(self) -> bool:
        """True when a mesh spreads the run over devices (data parallelism)."""
        return self.mesh is not None

    @property
    def data_devices(self) -> int:
        """Data-parallel shards (devices per side with ``split-data``; 1 without a mesh)."""
        return 1 if self.mesh is None else self.mesh.devices.size

    @property
    def kind(self) -> str:
        """``single``, ``split``, ``data`` or ``split-data`` (the topology's name)."""
        if self.critic_mesh is not None:
            return "split-data"
        if self.mesh is not None:
            return "data"
        return "split" if self.split else "single"

    def describe(self) -> str:
        """One line naming the devices."""
        if self.mesh is not None:
            devices = list(self.mesh.devices.flat)
            if self.critic_mesh is not None:
                devices += list(self.critic_mesh.devices.flat)
            processes = len({d.process_index for d in devices})
            kind = self.actor.platform
            where = f"{processes} processes" if processes > 1 else "1 process"
            if self.critic_mesh is not None:
                k = self.data_devices
                return (
                    f"split-data over {2 * k} {kind} devices ({where}): actor side "
                    f"data-parallel over {k}, critic side over {k}"
                )
            return f"data-parallel over {self.data_devices} {kind} devices ({where})"
        if not self.split:
            return f"single device {self.actor}"
        return f"split: actor on {self.actor}, critic on {self.critic}, eval on {self.eval}"


class Sink(Protocol):
    """Receives one record per chunk (and eval records); ``close`` flushes.

    A sink may set ``queue_size`` to change how many records wait for it (the metrics
    thread drops, and counts, what does not fit).
    """

    name: str

    def write(self, record: Record) -> None:
        """Consume one record."""

    def close(self) -> None:
        """Flush and release resources."""


EVAL_FIELDS = ("eval_return", "eval_return_std", "eval_length", "eval_return_se")


def clean(value: Any) -> Any:
    """JSON-ready: NaN/inf become None, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "tolist"):
        return clean(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def kept_obs_dtype(dtype: Any) -> str:
    """The dtype observations of ``dtype`` are kept in (:attr:`EnvSpec.obs_dtype`), for
    every env family, device or host: a one-byte dtype (bool, uint8, int8: grids and
    frames, a quarter of float32's memory in a replay buffer) as it is, anything else as
    float32 (what the networks compute in). gymnax's MinAtar games, which emit their 0/1
    grids as float32, are kept as bool by their adapter."""
    d = np.dtype(dtype)
    return d.name if d.itemsize == 1 and d.kind in "biu" else "float32"


def keep_obs(obs: jax.Array) -> jax.Array:
    """``obs`` in the dtype it is kept in (:func:`kept_obs_dtype`; no-op when it is)."""
    return obs.astype(kept_obs_dtype(obs.dtype))


def legal_actions(spec: EnvSpec, obs: jax.Array) -> jax.Array | None:
    """``bool [B, action_dim]``: the legal actions of each observation of the batch ``obs
    [B, ...]`` (as the env gives it, not normalised): the last ``action_dim`` entries of
    each flattened observation, 1 legal (:attr:`EnvSpec.action_mask`); a row with none
    legal is all legal (nothing to obey). None for an env without masks."""
    if not (spec.discrete and spec.action_mask):
        return None
    x = obs.reshape(obs.shape[0], -1)[:, -spec.action_dim :] > 0.5
    return x | ~jnp.any(x, axis=-1, keepdims=True)
