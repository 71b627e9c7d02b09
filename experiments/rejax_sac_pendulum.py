"""rejax's SAC on gymnax Pendulum-v1 with its own shipped settings, whole process (a cold
start's peer: rejax compiles its one program every run).

    python experiments/rejax_sac_pendulum.py     (prints the final return and seconds)

The settings are read from jaxspreeze.score.settings' rejax row (rejax's
configs/gymnax/pendulum.yaml; a no-JAX module, the only jaxspreeze this process imports);
the five-value env view is jaxspreeze.score.peers.FiveValueEnv's, copied here so that this
process imports no more of jaxspreeze.
"""

import time

T0 = time.time()

import gymnax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import rejax  # noqa: E402

from jaxspreeze.score import settings  # noqa: E402

OWN = settings.published("rejax", "sac", "gymnax/Pendulum-v1")  # rejax's own, one place


class FiveValueEnv:
    """A gymnax >= 1.0 env through gymnax 0.x's five-value ``step`` (rejax 0.1.3)."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        if name == "_env" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._env, name)

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        return obs, state, reward, jnp.logical_or(terminated, truncated), info


def main() -> None:
    env, env_params = gymnax.make("Pendulum-v1")
    algo = rejax.SAC.create(
        env=FiveValueEnv(env),
        env_params=env_params,
        **OWN.options,
    )
    _, (_, returns) = jax.block_until_ready(jax.jit(algo.train)(jax.random.PRNGKey(0)))
    print(f"final {float(returns[-1].mean()):.1f} s {time.time() - T0:.1f}")


if __name__ == "__main__":
    main()
