"""How long a small jitted call waits while another thread runs a big program on a CPU.

A host evaluator or sampling worker calls a small jitted policy once per env step while
the learner's programs run on another thread. This times such a small call (the median
and the largest of ``--calls``) while a thread runs a big program over and over, with the
small call's inputs on the big program's device (``cpu:0``) or on a second CPU device
(``--devices 2``: JAX_NUM_CPU_DEVICES, set here before JAX starts).

    taskset -c 1 python experiments/cpu_device_queue.py --devices 1
    taskset -c 1 python experiments/cpu_device_queue.py --devices 2
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=1, help="CPU devices (1 or 2)")
    parser.add_argument("--size", type=int, default=1024, help="the big program's matrix side")
    parser.add_argument("--calls", type=int, default=50, help="small calls timed")
    args = parser.parse_args()
    os.environ["JAX_NUM_CPU_DEVICES"] = str(args.devices)

    import jax
    import jax.numpy as jnp

    big_device, small_device = jax.devices()[0], jax.devices()[-1]
    big = jax.jit(lambda x: jnp.tanh(x @ x) @ x)
    small = jax.jit(lambda w, o: jnp.tanh(o @ w))  # a policy's size: 5 obs of 17, 6 actions
    x = jax.device_put(jnp.ones((args.size, args.size)) / args.size, big_device)
    w = jax.device_put(jnp.ones((17, 6)), small_device)
    o = jax.device_put(jnp.ones((5, 17)), small_device)
    jax.block_until_ready((big(x), small(w, o)))  # compiled before any timing

    def timed(fn) -> list[float]:
        out = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            out.append(time.perf_counter() - t0)
        return sorted(out)

    big_alone = timed(lambda: big(x))
    small_alone = timed(lambda: small(w, o))
    stop = threading.Event()

    def learner() -> None:
        y = x
        while not stop.is_set():
            y = jax.block_until_ready(big(y))

    thread = threading.Thread(target=learner, daemon=True)
    thread.start()
    time.sleep(0.5)
    small_beside = timed(lambda: small(w, o))
    stop.set()
    thread.join()
    ms = lambda s: round(1e3 * s, 3)
    print(
        json.dumps(
            {
                "devices": args.devices,
                "big_on": str(big_device),
                "small_on": str(small_device),
                "big_alone_median_ms": ms(big_alone[len(big_alone) // 2]),
                "small_alone_median_ms": ms(small_alone[len(small_alone) // 2]),
                "small_beside_big_median_ms": ms(small_beside[len(small_beside) // 2]),
                "small_beside_big_max_ms": ms(small_beside[-1]),
                "affinity_cpus": len(os.sched_getaffinity(0)),
            }
        )
    )


if __name__ == "__main__":
    main()
