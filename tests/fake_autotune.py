"""A fake clock and a fake device prober for autotune's tests (test_autotune,
test_autotune_golden, test_autotune_host): known rates, no compile, exact answers."""

from __future__ import annotations

from jaxspreeze.autotune import probes
from jaxspreeze.autotune.choose import Point


class FakeClock:
    """A clock that only moves when a fake probe says it took time."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeProber:
    """Rates with known knees: S(n) = s_unit * min(n, s_knee), U(B) = u_unit * min(B, u_knee);
    each point costs ``cost_s`` on the clock; ``calls`` lists the points taken."""

    def __init__(
        self,
        clock: FakeClock,
        s_knee: int = 64,
        u_knee: int = 1024,
        s_unit: float = 1e4,
        u_unit: float = 100.0,
        cost_s: float = 1.0,
        fixed_bytes: int = 0,
        bytes_per_sample: int = 0,
    ) -> None:
        self.clock, self.cost_s = clock, cost_s
        self.s = lambda n: s_unit * min(n, s_knee)
        self.u = lambda b: u_unit * min(b, u_knee)
        self.fixed_bytes = fixed_bytes
        self.bytes_per_sample = bytes_per_sample
        self.calls: list[tuple[str, int]] = []

    def sampling_bytes(self, num_envs: int) -> int:
        return 0

    def update_bytes(self, batch: int) -> int:
        return batch * self.bytes_per_sample

    def _point(self, kind: str, value: int, rate: float, nbytes: int) -> Point:
        self.calls.append((kind, value))
        self.clock.t += self.cost_s
        return Point(value, rate, 0.8 * self.cost_s, 0.001, value, [rate] * 5, nbytes)

    def sampling(self, num_envs: int) -> Point:
        return self._point("sampling", num_envs, self.s(num_envs), self.sampling_bytes(num_envs))

    def update(self, batch: int) -> Point:
        return self._point("update", batch, self.u(batch), self.update_bytes(batch))

    def retime(self, kind: str, value: int) -> list[float]:
        return [(self.s if kind == "sampling" else self.u)(value)] * probes.REPS
