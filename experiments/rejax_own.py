"""A rejax trainer on a gymnax task with rejax's own shipped settings, whole process (a cold
start's peer: rejax compiles its one program every run).

    python experiments/rejax_own.py ppo CartPole-v1 [--total-steps 200000]

The settings are jaxspreeze.score.settings' rejax entry for the task (rejax's
configs/gymnax/<task>.yaml), the budget scaled to ``--total-steps`` (default: the
entry's); the five-value env view is experiments/rejax_sac_pendulum.py's (SAC on
Pendulum: that script). Prints the final return and seconds.
"""

import time

T0 = time.time()

import argparse  # noqa: E402

import gymnax  # noqa: E402
import jax  # noqa: E402
import rejax  # noqa: E402
from rejax_sac_pendulum import FiveValueEnv  # noqa: E402

from jaxspreeze.score import settings  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("algo", help="rejax's algorithm: ppo, sac, td3, ...")
    p.add_argument("task", help="the gymnax id: CartPole-v1, Pendulum-v1, ...")
    p.add_argument("--total-steps", type=int, default=None, help="default: the entry's")
    a = p.parse_args()
    own = settings.published("rejax", a.algo, f"gymnax/{a.task}")
    if own is None:
        raise SystemExit(f"algo/task: no rejax settings for {a.algo} on gymnax/{a.task}")
    options = dict(own.options)
    if a.total_steps:
        options[own.budget] = a.total_steps
    env, env_params = gymnax.make(a.task)
    algo = getattr(rejax, a.algo.upper()).create(
        env=FiveValueEnv(env), env_params=env_params, **options
    )
    _, (_, returns) = jax.block_until_ready(jax.jit(algo.train)(jax.random.PRNGKey(0)))
    print(f"final {float(returns[-1].mean()):.1f} s {time.time() - T0:.1f}")


if __name__ == "__main__":
    main()
