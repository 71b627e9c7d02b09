"""CPU seconds of each phase of a cold run, in one process: jaxspreeze's default job or rejax.

    python experiments/cold_phases.py                      # SAC gymnax/Pendulum-v1, defaults
    python experiments/cold_phases.py --hidden 64 64       # the same at rejax's width
    python experiments/cold_phases.py --rejax              # rejax's SAC, its own settings

Each phase is timed with ``getrusage`` (user + system of the whole process: XLA's threads
count) and JAX's persistent cache is off, so every program is traced and compiled here:
imports; the init (trace, compile, run); the chunk's and the warm-up's compile; the
warm-up's run; every chunk of the run. rejax: imports; its one program's trace and
lowering; its compile; its run (training and its own evaluations).
(experiments/results/cold_start_cpu.md)
"""

import argparse
import resource


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def jaxspreeze_phases(hidden: list[int] | None) -> None:
    c = cpu()
    import jax

    from jaxspreeze import schedules
    from jaxspreeze.run import trainer  # noqa: F401  (what `jaxspreeze train` imports)
    from jaxspreeze.setup import devices
    from jaxspreeze.setup.config import RunConfig
    from jaxspreeze.setup.plan import plan

    jax.config.update("jax_enable_compilation_cache", False)
    c = _say("imports", c)
    cfg = RunConfig() if not hidden else RunConfig().replace(sac={"hidden": tuple(hidden)})
    schedule = schedules.make(plan(cfg, on_devices=False).placed(devices.single()))
    state = jax.block_until_ready(schedule.init())
    c = _say("init: trace, compile, run", c)
    schedule.compile(state)
    c = _say("chunk and warm-up: compile", c)
    state = jax.block_until_ready(schedule.warmup(state))
    c = _say("warm-up: run", c)
    for _ in range(schedule.num_chunks):
        state, metrics = schedule.chunk(state)
        jax.block_until_ready((state, metrics))
    _say(f"training: {schedule.num_chunks} chunks of {schedule.iterations_per_chunk}", c)


def rejax_phases() -> None:
    c = cpu()
    import gymnax
    import jax
    import rejax
    from rejax_sac_pendulum import OWN, FiveValueEnv

    jax.config.update("jax_enable_compilation_cache", False)
    c = _say("imports", c)
    env, env_params = gymnax.make("Pendulum-v1")
    algo = rejax.SAC.create(env=FiveValueEnv(env), env_params=env_params, **OWN.options)
    lowered = jax.jit(algo.train).lower(jax.random.PRNGKey(0))
    c = _say("trace and lowering", c)
    program = lowered.compile()
    c = _say("compile", c)
    _, (_, returns) = jax.block_until_ready(program(jax.random.PRNGKey(0)))
    _say(f"run (final return {float(returns[-1].mean()):.1f})", c)


def _say(what: str, since: float) -> float:
    now = cpu()
    print(f"{what}: {now - since:.2f} CPU s", flush=True)
    return now


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, nargs="+", help="SAC's hidden widths (default its own)")
    p.add_argument("--rejax", action="store_true", help="rejax's SAC with its own settings")
    a = p.parse_args()
    if a.rejax:
        rejax_phases()
    else:
        jaxspreeze_phases(a.hidden)


if __name__ == "__main__":
    main()
