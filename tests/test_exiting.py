"""The interpreter's exit lets jaxspreeze's working threads finish (core.exiting)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    from jaxspreeze.core import exiting

    stopped = threading.Event()

    def work():  # a daemon thread still working when the main thread ends
        time.sleep(1.0)
        open(sys.argv[1], "w").write("stopped" if stopped.is_set() else "finished")

    t = threading.Thread(target=work, daemon=True)
    t.start()
    if sys.argv[2] == "finish":
        exiting.finish_at_exit(t, stopped.set)
    """
)


def test_a_thread_handed_over_finishes_before_the_exit(tmp_path):
    """Handed to finish_at_exit: its stop is called and the exit waits for it, with one
    line saying so; not handed over: the exit kills it (the file is never written)."""
    done = tmp_path / "done"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(done), "finish"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert done.read_text() == "stopped"
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("jaxspreeze: letting work in flight finish before exiting")
    other = tmp_path / "other"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(other), "no"], capture_output=True)
    assert proc.returncode == 0 and not other.exists() and not proc.stderr


NAN_ENV = textwrap.dedent(
    """
    import sys
    import jax.numpy as jnp
    from gymnax.environments.classic_control.pendulum import Pendulum
    import jaxspreeze
    from jaxspreeze import RunConfig
    from jaxspreeze.core.errors import NonFiniteError

    class NaNPendulum(Pendulum):  # its observations turn NaN after 50 steps
        def step_env(self, key, state, action, params):
            obs, state, r, d, info = super().step_env(key, state, action, params)
            return jnp.where(state.time > 50, jnp.nan, obs), state, r, d, info

    cfg = RunConfig(algo="sac", total_steps=2000, num_envs=4, logdir=sys.argv[1])
    try:
        jaxspreeze.train(cfg, env=NaNPendulum())
    except NonFiniteError as e:
        print("stopped:", type(e).__name__)
    """
)


@pytest.mark.slow
def test_no_abort_at_exit_after_a_nan_observation(tmp_path):
    """train(env=...) stopped by a NaN observation: the interpreter's exit does not abort
    (it was 134, "FATAL: exception not rethrown", with the evaluation still in flight)."""
    proc = subprocess.run(
        [sys.executable, "-c", NAN_ENV, str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "stopped: NonFiniteError" in proc.stdout
