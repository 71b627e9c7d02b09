"""Watch a trained policy: one deterministic episode as a GIF, for every env family.

:func:`render_run` loads a run's ``policy.msgpack``, rolls out one deterministic episode
with the policy of one seed (0 by default) and writes a file (default
``<run>/render.gif``). Who draws the frames, by family (the family table's ``renderer``,
``envids.FAMILIES``, names one of :data:`RENDERERS`):

- gymnax: drawn here from the env state (gymnax's own renderer needs gym), for the tasks
  of :data:`DRAWERS`;
- brax and MuJoCo Playground: MuJoCo's own renderer (``mujoco.Renderer``, through
  ``brax.io.image.render_array`` and Playground's ``env.render``), which needs an offline
  OpenGL backend: EGL or OSMesa (:func:`mujoco_gl`; ``MUJOCO_GL`` picks one, else EGL is
  tried, then OSMesa). Without one a GIF is refused with one line naming what failed.
  brax also writes its HTML viewer (``--out FILE.html``, ``brax.io.html``; the default
  when no backend works), which loads its JavaScript from the internet
  (cdn.jsdelivr.net): it shows nothing offline;
- gymnasium (``gymnasium/<id>`` and a user's env, ``user/<ClassName>``): the env itself
  (``render_mode="rgb_array"``; MuJoCo tasks through the backend above) or, for the
  classic-control tasks of :data:`DRAWERS` when it cannot (no pygame), the same drawings
  (:func:`gymnasium_frames`);
- envpool: the pool's own frames (``render_mode="rgb_array"``; MuJoCo tasks draw into an
  offline OpenGL context made current here) (:func:`envpool_frames`);
- the JAX suites (Craftax, Jumanji, XLand-MiniGrid, Navix): the family's adapter draws the
  episode's states with the suite's own renderer (its ``frames(render_state, states)``:
  Craftax's pixel renderer, Jumanji's viewers in ``rgb_array`` mode, XLand-MiniGrid's
  ``env.render``, Navix's ``observations.rgb``) (:func:`adapter_frames`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import imageio.v3 as iio
import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image, ImageDraw

from jaxspreeze.agent.policy import Policy, load_policy
from jaxspreeze.core import envids
from jaxspreeze.envs import FAMILIES, env_spec, make_env
from jaxspreeze.host import hostenvs

WIDTH, HEIGHT = 320, 240
Frame = np.ndarray  # [H, W, 3] uint8
MUJOCO_GL_BACKENDS = ("egl", "osmesa")  # offline OpenGL for MuJoCo, in the order tried
BRAX_HTML_NOTE = (
    "note: the brax HTML viewer loads its JavaScript from the internet (cdn.jsdelivr.net): "
    "it shows nothing offline; --out FILE.gif draws the frames here instead"
)
Say = Callable[[str], None]


# ------------------------------------------------------------------- gymnax drawings
class _Canvas:
    """A PIL image with world coordinates: x in [x0, x1], y in [y0, y0 + aspect span]."""

    def __init__(self, x0: float, x1: float, y0: float):
        self.image = Image.new("RGB", (WIDTH, HEIGHT), (250, 250, 250))
        self.draw = ImageDraw.Draw(self.image)
        self.x0, self.y0 = x0, y0
        self.scale = WIDTH / (x1 - x0)

    def px(self, x: float, y: float) -> tuple[float, float]:
        return (x - self.x0) * self.scale, HEIGHT - (y - self.y0) * self.scale

    def line(self, a, b, width: float, fill) -> None:
        self.draw.line([self.px(*a), self.px(*b)], fill=fill, width=max(int(width * self.scale), 1))

    def disc(self, c, r: float, fill) -> None:
        x, y = self.px(*c)
        r = r * self.scale
        self.draw.ellipse([x - r, y - r, x + r, y + r], fill=fill)

    def box(self, a, b, fill) -> None:
        (xa, ya), (xb, yb) = self.px(*a), self.px(*b)
        self.draw.rectangle([min(xa, xb), min(ya, yb), max(xa, xb), max(ya, yb)], fill=fill)

    def text(self, s: str) -> None:
        self.draw.text((6, 4), s, fill=(40, 40, 40))

    def frame(self) -> Frame:
        return np.asarray(self.image, np.uint8)


def draw_pendulum(state: Any, params: Any, t: int) -> Frame:
    """Pendulum-v1: a rod from the pivot at angle ``theta`` (0 = upright), torque as a bar."""
    c = _Canvas(-1.6, 1.6, -1.2)
    theta, u = float(state.theta), float(state.last_u)
    tip = (math.sin(theta), math.cos(theta))
    c.box((0, -1.05), (u / 2.0 * 0.8, -0.95), (90, 140, 220))  # applied torque
    c.line((0, 0), tip, 0.12, (200, 70, 60))
    c.disc((0, 0), 0.06, (30, 30, 30))
    c.text(f"step {t}   torque {u:+.2f}")
    return c.frame()


def draw_cartpole(state: Any, params: Any, t: int) -> Frame:
    """CartPole-v1: the cart on its track and the pole at angle ``theta`` (0 = upright)."""
    c = _Canvas(-2.6, 2.6, -0.6)
    x, theta = float(state.x), float(state.theta)
    pole = 2 * float(params.length)
    c.line((-2.4, 0), (2.4, 0), 0.02, (120, 120, 120))
    c.box((x - 0.25, -0.08), (x + 0.25, 0.08), (60, 60, 60))
    c.line(
        (x, 0.05), (x + pole * math.sin(theta), 0.05 + pole * math.cos(theta)), 0.08, (200, 150, 80)
    )
    c.disc((x, 0.05), 0.04, (130, 130, 200))
    c.text(f"step {t}")
    return c.frame()


def draw_mountain_car(state: Any, params: Any, t: int) -> Frame:
    """MountainCar(-Continuous): the car on the hill ``0.45 sin(3x) + 0.55``, and the flag."""
    lo, hi = float(params.min_position), float(params.max_position)
    c = _Canvas(lo, hi, -0.1)
    xs = np.linspace(lo, hi, 100)
    ys = 0.45 * np.sin(3 * xs) + 0.55
    for i in range(len(xs) - 1):
        c.line((xs[i], ys[i]), (xs[i + 1], ys[i + 1]), 0.01, (90, 90, 90))
    goal = float(params.goal_position)
    gy = 0.45 * math.sin(3 * goal) + 0.55
    c.line((goal, gy), (goal, gy + 0.15), 0.006, (40, 40, 40))
    c.box((goal, gy + 0.1), (goal + 0.07, gy + 0.15), (220, 190, 40))
    x = float(state.position)
    c.disc((x, 0.45 * math.sin(3 * x) + 0.55 + 0.04), 0.045, (200, 70, 60))
    c.text(f"step {t}   velocity {float(state.velocity):+.3f}")
    return c.frame()


def draw_acrobot(state: Any, params: Any, t: int) -> Frame:
    """Acrobot-v1: two links hanging from the pivot (angles 0 = straight down)."""
    c = _Canvas(-2.4, 2.4, -1.8)
    a1, a2 = float(state.joint_angle1), float(state.joint_angle2)
    l1, l2 = float(params.link_length_1), float(params.link_length_2)
    p1 = (l1 * math.sin(a1), -l1 * math.cos(a1))
    p2 = (p1[0] + l2 * math.sin(a1 + a2), p1[1] - l2 * math.cos(a1 + a2))
    c.line((-2.4, 1.0), (2.4, 1.0), 0.01, (160, 160, 160))  # the goal height
    c.line((0, 0), p1, 0.1, (60, 120, 200))
    c.line(p1, p2, 0.1, (60, 120, 200))
    c.disc((0, 0), 0.06, (30, 30, 30))
    c.disc(p1, 0.06, (200, 180, 60))
    c.text(f"step {t}")
    return c.frame()


DRAWERS: dict[str, Callable[[Any, Any, int], Frame]] = {
    "Pendulum-v1": draw_pendulum,
    "CartPole-v1": draw_cartpole,
    "MountainCar-v0": draw_mountain_car,
    "MountainCarContinuous-v0": draw_mountain_car,
    "Acrobot-v1": draw_acrobot,
}


# ------------------------------------------------------------------------- the episode
def rollout_episode(
    policy: Policy, seed_index: int = 0, max_steps: int | None = None, key: int = 0
):
    """One deterministic episode of seed ``seed_index``'s policy in one env.

    Returns (inner env states before each step, stacked ``[T, 1, ...]``; the episode's
    number of steps; its return).
    """
    env = make_env(policy.cfg.env, 1, policy.cfg.obs_keys)
    steps = max_steps or env.spec.max_episode_steps
    actor = jax.tree.map(jnp.asarray, policy.seed(seed_index))
    act = policy.algo.act

    @jax.jit
    def run(actor, key):
        k_reset, k_run = jax.random.split(key)
        obs, env_state = env.reset(k_reset)

        def step(carry, k):
            obs, env_state, policy_carry, done = carry
            k_act, k_env = jax.random.split(k)
            action, policy_carry = act(actor, policy_carry, obs, k_act, True)
            nxt, nxt_state, reward, term, trunc, _ = env.step(k_env, env_state, action)
            out = (env_state.inner, done[0], jnp.where(done, 0.0, reward)[0])
            return (nxt, nxt_state, policy_carry, done | term | trunc), out

        init = (obs, env_state, policy.algo.initial_carry(1), jnp.zeros(1, bool))
        _, (inner, done, reward) = jax.lax.scan(step, init, jax.random.split(k_run, steps))
        return inner, done, reward

    inner, done, reward = jax.device_get(run(actor, jax.random.key(key)))
    length = int(np.argmax(done)) if done.any() else steps
    return inner, length, float(np.sum(reward))


def gif_frames(policy: Policy, seed_index: int = 0, max_steps: int | None = None) -> list[Frame]:
    """The frames of one episode of a gymnax task (see :data:`DRAWERS`)."""
    name = policy.cfg.env.partition("/")[2]
    draw = DRAWERS.get(name)
    if draw is None:
        raise ValueError(
            f"no renderer for {policy.cfg.env}; GIFs are drawn for gymnax/"
            + ", gymnax/".join(DRAWERS)
        )
    _, params = make_env(policy.cfg.env, 1, policy.cfg.obs_keys).render_state
    inner, length, _ = rollout_episode(policy, seed_index, max_steps)
    return [draw(jax.tree.map(lambda x: x[t, 0], inner), params, t) for t in range(max(length, 1))]


# --------------------------------------------------------------------- gymnasium runs
def _classic_state(name: str, env: Any) -> tuple[Any, Any]:
    """(state, params) of a gymnasium classic-control env as :data:`DRAWERS` read them."""
    u = env.unwrapped
    s = [float(x) for x in np.asarray(u.state, np.float64).reshape(-1)]
    if name == "Pendulum-v1":
        last_u = 0.0 if u.last_u is None else float(np.asarray(u.last_u).reshape(-1)[0])
        return SimpleNamespace(theta=s[0], last_u=last_u), None
    if name == "CartPole-v1":
        return SimpleNamespace(x=s[0], theta=s[2]), SimpleNamespace(length=float(u.length))
    if name in ("MountainCar-v0", "MountainCarContinuous-v0"):
        params = SimpleNamespace(
            min_position=u.min_position, max_position=u.max_position, goal_position=u.goal_position
        )
        return SimpleNamespace(position=s[0], velocity=s[1]), params
    params = SimpleNamespace(link_length_1=u.LINK_LENGTH_1, link_length_2=u.LINK_LENGTH_2)
    return SimpleNamespace(joint_angle1=s[0], joint_angle2=s[1]), params  # Acrobot-v1


def _frame_of(env: Any, name: str, t: int, own: bool) -> Frame:
    if own:
        return np.asarray(env.render())[..., :3].astype(np.uint8)
    state, params = _classic_state(name, env)
    return DRAWERS[name](state, params, t)


def _gymnasium_env(name: str) -> tuple[Any, str]:
    """A new env of a gymnasium run, rendering rgb_array frames, and its id for the drawings."""
    if hostenvs.is_user_env(name):
        entry = hostenvs.user_env(name)
        if entry is None or entry.fns is None:
            hostenvs.make_host_env(name, 1)  # raises: pass the env again from Python
        assert entry is not None and entry.fns is not None
        env = entry.fns[0]()
        own_id = getattr(getattr(env, "spec", None), "id", None) or ""
        return env, own_id
    hostenvs.check_host_env_name(name)  # imports the module of a "module:Env" id
    gym = importlib.import_module("gymnasium")  # lazy: heavy, and only for host runs
    bare = name.partition("/")[2].rpartition(":")[2]
    if "mujoco" in str(getattr(gym.spec(bare), "entry_point", "")):
        with contextlib.suppress(ValueError):  # none works: the env says why it draws nothing
            os.environ.setdefault("MUJOCO_GL", mujoco_gl())
    return gym.make(bare, render_mode="rgb_array"), bare


def gymnasium_frames(
    policy: Policy, seed_index: int = 0, max_steps: int | None = None
) -> list[Frame]:
    """The frames of one deterministic episode of a gymnasium run (reset with seed 0).

    The env draws them itself (``render_mode="rgb_array"``; a user's env as its factory
    made it); where it cannot (gymnasium's classic control needs pygame,
    ``gymnasium[classic-control]``) the drawings of :data:`DRAWERS` are used for the tasks
    they cover. Another env that draws no frames (e.g. MuJoCo without an OpenGL backend) is
    refused with the reason.
    """
    name = policy.cfg.env
    if name.partition("/")[0] == "envpool":
        return envpool_frames(policy, seed_index, max_steps)
    spec = env_spec(name, policy.cfg.obs_keys)
    env, bare = _gymnasium_env(name)
    try:
        to_env = hostenvs._Actions(spec, env.action_space)
        act = jax.jit(policy.algo.act, static_argnums=4)
        actor = jax.tree.map(jnp.asarray, policy.seed(seed_index))
        key, carry = jax.random.key(0), policy.algo.initial_carry(1)
        obs, _ = env.reset(seed=0)
        try:
            first = env.render()
            own = isinstance(first, np.ndarray) and first.ndim == 3
            why = "its render() gave no rgb_array frame"
        except Exception as e:  # gymnasium raises DependencyNotInstalled, MuJoCo GL errors
            own, why = False, f"{type(e).__name__}: {e}"
        if not own and bare not in DRAWERS:
            hint = " (build it with render_mode='rgb_array')" if hostenvs.is_user_env(name) else ""
            raise ValueError(f"{name} draws no frames here ({why}){hint}")
        frames = [_frame_of(env, bare, 0, own)]
        for t in range(max_steps or spec.max_episode_steps):
            x = np.asarray(obs, spec.obs_dtype).reshape(spec.obs_shape)[None]
            action, carry = act(actor, carry, x, key, True)
            action = to_env(np.asarray(action))[0]
            obs, _, terminated, truncated, _ = env.step(action)
            frames.append(_frame_of(env, bare, t + 1, own))
            if terminated or truncated:
                break
    finally:
        env.close()
    return frames


def envpool_frames(
    policy: Policy, seed_index: int = 0, max_steps: int | None = None
) -> list[Frame]:
    """The frames of one deterministic episode of an envpool run: a pool of one env built
    with ``render_mode="rgb_array"`` (seed 0) draws them. Its MuJoCo tasks draw with the
    OpenGL context current on the calling thread: an offline one is made current here
    (:func:`mujoco_gl`); its other tasks need none."""
    name = policy.cfg.env
    task = name.partition("/")[2]
    envpool = hostenvs._import_envpool()
    spec = env_spec(name, policy.cfg.obs_keys)
    # a MuJoCo task (envpool.mujoco.*) draws into the current OpenGL context; with none,
    # MuJoCo ends the process: make an offline one current first (or refuse)
    entry = importlib.import_module("envpool.registration").registry.specs.get(task)
    on_mujoco = bool(entry) and str(entry[0]).startswith("envpool.mujoco")
    gl = _current_gl_context() if on_mujoco else contextlib.nullcontext()
    with gl:
        pool = envpool.make(task, env_type="gymnasium", num_envs=1, seed=0, render_mode="rgb_array")
        try:
            to_env = hostenvs._Actions(spec, pool.action_space)
            act = jax.jit(policy.algo.act, static_argnums=4)
            actor = jax.tree.map(jnp.asarray, policy.seed(seed_index))
            key, carry = jax.random.key(0), policy.algo.initial_carry(1)
            obs, _ = pool.reset()
            frames = [_pool_frame(pool, name)]
            for _ in range(max_steps or spec.max_episode_steps):
                x = np.asarray(obs, spec.obs_dtype).reshape(1, *spec.obs_shape)
                action, carry = act(actor, carry, x, key, True)
                obs, _, terminated, truncated, _ = pool.step(to_env(np.asarray(action)))
                frames.append(_pool_frame(pool, name))
                if terminated[0] or truncated[0]:
                    break
        finally:
            pool.close()
    return frames


def _pool_frame(pool: Any, name: str) -> Frame:
    try:
        frame = np.asarray(pool.render())
    except Exception as e:  # envpool raises RuntimeError for a task that cannot draw
        raise ValueError(f"{name} draws no frames here ({type(e).__name__}: {e})") from None
    return frame.reshape(frame.shape[-3:])[..., :3].astype(np.uint8)


# ----------------------------------------------------- MuJoCo's renderer (brax, Playground)
def _gl_context_class(backend: str) -> Any:
    return importlib.import_module(f"mujoco.{backend}").GLContext


@functools.cache
def mujoco_gl() -> str:
    """The offline OpenGL backend MuJoCo's renderer draws with in this process.

    ``MUJOCO_GL`` set: that backend only; unset: EGL, then OSMesa. The first that makes a
    context is kept (``mujoco.Renderer`` draws through it from then on) and named
    (``"egl"`` or ``"osmesa"``). None works: ValueError, one line naming what failed.
    """
    wanted = os.environ.get("MUJOCO_GL", "").lower().strip()
    tries = (wanted,) if wanted else MUJOCO_GL_BACKENDS
    failed = []
    for backend in tries:
        try:
            cls = _gl_context_class(backend)
            context = cls(8, 8)
            context.make_current()
            context.free()
        except Exception as e:  # ImportError, OSError, RuntimeError, PyOpenGL's errors
            detail = " ".join(f"{type(e).__name__}: {e}".split())[:160]
            failed.append(f"MUJOCO_GL={backend} ({detail})")
            continue
        _use_gl_context(cls)
        return backend
    raise ValueError(
        "no offline OpenGL backend for MuJoCo's renderer: "
        + "; ".join(failed)
        + " (install EGL, libegl1 or a GPU driver, or OSMesa, libosmesa6; or set MUJOCO_GL)"
    )


def _use_gl_context(cls: Any) -> None:
    """Make ``mujoco.Renderer`` draw through ``cls`` (it reads the class mujoco chose from
    ``MUJOCO_GL`` when it was imported, perhaps before any backend was asked for)."""
    for module in ("mujoco.rendering.classic.gl_context", "mujoco.gl_context"):
        with contextlib.suppress(ImportError):
            importlib.import_module(module).GLContext = cls


@contextlib.contextmanager
def _current_gl_context():
    """An offline OpenGL context current on this thread for the block (envpool's MuJoCo)."""
    context = _gl_context_class(mujoco_gl())(8, 8)
    context.make_current()
    try:
        yield
    finally:
        context.free()


@contextlib.contextmanager
def _quiet_tqdm():
    """tqdm's bars off for the block (``TQDM_DISABLE``, read by every new bar)."""
    before = os.environ.get("TQDM_DISABLE")
    os.environ["TQDM_DISABLE"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = before


def _mujoco_episode(
    policy: Policy, seed_index: int, max_steps: int | None
) -> tuple[Any, list[Any]]:
    """The library env of a brax or Playground run and the states of one deterministic
    episode, for MuJoCo's renderer (which needs an offline OpenGL backend)."""
    mujoco_gl()  # raises with the reason when no offline backend works
    lib_env = make_env(policy.cfg.env, 1, policy.cfg.obs_keys).render_state
    inner, length, _ = rollout_episode(policy, seed_index, max_steps)
    return lib_env, [jax.tree.map(lambda x: x[t, 0], inner.state) for t in range(max(length, 1))]


def brax_frames(policy: Policy, seed_index: int = 0, max_steps: int | None = None) -> list[Frame]:
    """The frames of one deterministic episode of a brax run, drawn by MuJoCo's renderer
    through ``brax.io.image.render_array``."""
    from brax.io import image  # lazy: brax imports in about 3 s

    lib_env, states = _mujoco_episode(policy, seed_index, max_steps)
    frames = image.render_array(lib_env.sys, [s.pipeline_state for s in states], HEIGHT, WIDTH)
    return [np.asarray(f, np.uint8)[..., :3] for f in frames]


def playground_frames(
    policy: Policy, seed_index: int = 0, max_steps: int | None = None
) -> list[Frame]:
    """The frames of one deterministic episode of a Playground run, drawn by MuJoCo's
    renderer through the env's own ``render``."""
    lib_env, states = _mujoco_episode(policy, seed_index, max_steps)
    with _quiet_tqdm():  # Playground draws a progress bar per frame
        frames = lib_env.render(states, height=HEIGHT, width=WIDTH)
    return [np.asarray(f, np.uint8)[..., :3] for f in frames]


FRAME_SIDES = (160, 480)  # a frame's longer side is scaled into this range (pixels)


def fitted(frame: Frame) -> Frame:
    """``frame`` scaled so that its longer side lies in :data:`FRAME_SIDES`: a small one
    (Navix's 8-pixel tiles) by whole pixels (nearest), a large one down (bilinear)."""
    side = max(frame.shape[:2])
    low, high = FRAME_SIDES
    if side < low:
        k = -(-low // side)
        return np.repeat(np.repeat(frame, k, axis=0), k, axis=1)
    if side > high:
        h, w = (round(n * high / side) for n in frame.shape[:2])
        return np.asarray(Image.fromarray(frame).resize((w, h), Image.BILINEAR), np.uint8)
    return frame


def adapter_frames(
    policy: Policy, seed_index: int = 0, max_steps: int | None = None
) -> list[Frame]:
    """The frames of one deterministic episode of a JAX suite's run, drawn by the family's
    adapter from the episode's states (its ``frames(render_state, states)``, the suite's
    own renderer); ValueError (one line) where the suite draws none."""
    name = policy.cfg.env
    adapter = FAMILIES[name.partition("/")[0]]
    lib_env = make_env(name, 1, policy.cfg.obs_keys).render_state
    inner, length, _ = rollout_episode(policy, seed_index, max_steps)
    states = jax.tree.map(lambda x: x[: max(length, 1), 0], inner.state)
    try:
        drawn = adapter.frames(lib_env, states)
    except ValueError as e:
        raise ValueError(f"{name} draws no frames here: {e}") from None
    return [fitted(np.asarray(f, np.uint8)) for f in drawn]


def write_gif(frames: Sequence[Frame], out: str | Path, fps: int = 30) -> Path:
    """Write ``frames`` as a looping GIF (imageio)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(out, np.stack(frames), extension=".gif", duration=1000 / fps, loop=0)
    return out


def brax_html(policy: Policy, seed_index: int = 0, max_steps: int | None = None) -> str:
    """The brax viewer (``brax.io.html.render``) of one deterministic episode."""
    # heavy dependency (brax imports in about 3 s): imported only to render a brax task
    from brax.io import html

    brax_env = make_env(policy.cfg.env, 1, policy.cfg.obs_keys).render_state
    inner, length, _ = rollout_episode(policy, seed_index, max_steps)
    states = inner.state.pipeline_state
    frames = [jax.tree.map(lambda x: x[t, 0], states) for t in range(max(length, 1))]
    return html.render(brax_env.sys.tree_replace({"opt.timestep": brax_env.dt}), frames)


class Renderer(NamedTuple):
    """How a family's episodes are drawn (the family table's ``renderer`` names one of
    :data:`RENDERERS`): ``frames(policy, seed_index, max_steps)``; ``mujoco``: drawn by
    MuJoCo's renderer (an offline OpenGL backend is needed, and named); ``html``: a
    viewer written for ``--out FILE.html`` (with ``html_note`` said), or None."""

    frames: Callable[[Policy, int, int | None], list[Frame]]
    mujoco: bool = False
    html: Callable[[Policy, int, int | None], str] | None = None
    html_note: str = ""


RENDERERS: dict[str, Renderer] = {
    "drawings": Renderer(gif_frames),
    "brax": Renderer(brax_frames, mujoco=True, html=brax_html, html_note=BRAX_HTML_NOTE),
    "playground": Renderer(playground_frames, mujoco=True),
    "gymnasium": Renderer(gymnasium_frames),
    "envpool": Renderer(envpool_frames),
    "adapter": Renderer(adapter_frames),
}


def renderer_of(env: str) -> Renderer:
    """The renderer of the env id ``env``'s family (``envids.FAMILIES``; a user's env,
    ``user/<ClassName>``, draws itself like a gymnasium env); ValueError for none."""
    entry = envids.family_of(env)
    if entry is None and hostenvs.is_host_env(env):
        return RENDERERS["gymnasium"]
    if entry is None or entry.renderer not in RENDERERS:
        known = ", ".join(f"{n}/" for n, f in envids.FAMILIES.items() if f.renderer in RENDERERS)
        raise ValueError(f"no renderer for {env!r}; runs of {known} are rendered")
    return RENDERERS[entry.renderer]


def render_run(
    run_dir: str | Path,
    out: str | Path | None = None,
    *,
    seed_index: int = 0,
    max_steps: int | None = None,
    fps: int = 30,
    env: Any = None,
    say: Say | None = None,
) -> Path:
    """Render a finished run's policy to ``out``: a GIF (every family), or brax's HTML
    viewer (``.html``). Default ``<run>/render.gif`` (a brax run without an offline OpenGL
    backend: ``render.html``). ``env``: a user env run's env, passed again (as for
    ``jaxspreeze.train``). ``say`` gets the notes: the OpenGL backend used, and that the
    brax viewer needs the internet."""
    say = say or (lambda line: None)
    where = Path(run_dir) if Path(run_dir).is_dir() else Path(run_dir).parent
    hostenvs.load_user_env(where)
    if env is not None:
        hostenvs.register_user_env(env)
    env_name = _saved_env(where)
    policy = None
    if not env_name:  # a standalone policy file: its config is inside it
        policy = load_policy(run_dir)
        env_name = policy.cfg.env
    family, renderer = env_name.partition("/")[0], renderer_of(env_name)
    if out is None:
        html = renderer.html is not None and not _gl_works()
        out = Path(run_dir) / ("render.html" if html else "render.gif")
    out = Path(out)
    html = renderer.html is not None and out.suffix.lower() in (".html", ".htm")
    if not html and out.suffix.lower() != ".gif":
        also = " or an HTML viewer (.html)" if renderer.html is not None else ""
        raise ValueError(f"a {family} run renders to a GIF (.gif){also}; got --out {out}")
    if renderer.mujoco and not html:
        mujoco_gl()  # no offline OpenGL backend: refused before the policy loads
    policy = policy or load_policy(run_dir)
    if not 0 <= seed_index < policy.cfg.slots:
        raise ValueError(
            f"seed index {seed_index} out of range: the run has {policy.cfg.slots} seed(s)"
        )
    if html and renderer.html is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(renderer.html(policy, seed_index, max_steps))
        if renderer.html_note:
            say(renderer.html_note)
        return out
    frames = renderer.frames(policy, seed_index, max_steps)
    if renderer.mujoco:
        backend = mujoco_gl()
        say(f"drawn by MuJoCo's renderer through {backend.upper()} (MUJOCO_GL={backend})")
    return write_gif(frames, out, fps)


def _saved_env(where: Path) -> str:
    """The env name in the run's (or the policy file's directory's) ``config.json``; ""
    when there is none (a standalone policy file: its config is read with the policy)."""
    try:
        return str(json.loads((where / "config.json").read_text())["env"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _gl_works() -> bool:
    try:
        mujoco_gl()
    except ValueError:
        return False
    return True
