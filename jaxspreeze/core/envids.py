"""The env families' table: each family registers here once, with no JAX and no simulator.

:data:`FAMILIES` holds one :class:`Family` per ``<family>/`` prefix. Every consumer reads
it: the env registry (:mod:`jaxspreeze.envs` imports a device family's ``adapter``;
:mod:`jaxspreeze.host.hostenvs` steps the host families), the command line's early checks
(:mod:`jaxspreeze.cli.fastcheck`: the family names and the static ``ids``), the program
cache's key (:mod:`jaxspreeze.core.programs`: the ``distributions``), rendering
(:mod:`jaxspreeze.agent.render`: the ``renderer``) and ``jaxspreeze envs``. A leaf: it imports
nothing of ours, so every floor may read it. Adding a device family is its adapter module
(``envs/<family>.py``) and one :class:`Family` in :data:`FAMILIES`.
"""

from __future__ import annotations

from dataclasses import dataclass

# jaxspreeze's brax tasks (jaxspreeze.envs.brax builds each with brax.envs.get_environment)
BRAX_NAMES = (
    "ant",
    "fast",
    "halfcheetah",
    "hopper",
    "humanoid",
    "humanoidstandup",
    "inverted_pendulum",
    "inverted_double_pendulum",
    "pusher",
    "reacher",
    "swimmer",
    "walker2d",
)

# gymnax.registered_envs (gymnax 1.0.1)
GYMNAX_NAMES = (
    "CartPole-v1",
    "Pendulum-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Asterix-MinAtar",
    "Breakout-MinAtar",
    "Freeway-MinAtar",
    "Seaquest-MinAtar",
    "SpaceInvaders-MinAtar",
    "Catch-bsuite",
    "DeepSea-bsuite",
    "MemoryChain-bsuite",
    "UmbrellaChain-bsuite",
    "DiscountingChain-bsuite",
    "MNISTBandit-bsuite",
    "SimpleBandit-bsuite",
    "FourRooms-misc",
    "MetaMaze-misc",
    "PointRobot-misc",
    "BernoulliBandit-misc",
    "GaussianBandit-misc",
    "Reacher-misc",
    "Swimmer-misc",
    "Pong-misc",
    "FrozenLake-misc",
)

# mujoco_playground.registry.ALL_ENVS (playground 0.2.0); whether a task's models are
# present (the Menagerie) is the full check's
PLAYGROUND_NAMES = (
    "AcrobotSwingup",
    "AcrobotSwingupSparse",
    "BallInCup",
    "CartpoleBalance",
    "CartpoleBalanceSparse",
    "CartpoleSwingup",
    "CartpoleSwingupSparse",
    "CheetahRun",
    "FingerSpin",
    "FingerTurnEasy",
    "FingerTurnHard",
    "FishSwim",
    "HopperHop",
    "HopperStand",
    "HumanoidStand",
    "HumanoidWalk",
    "HumanoidRun",
    "PendulumSwingup",
    "PointMass",
    "ReacherEasy",
    "ReacherHard",
    "SwimmerSwimmer6",
    "WalkerRun",
    "WalkerStand",
    "WalkerWalk",
    "ApolloJoystickFlatTerrain",
    "BarkourJoystick",
    "BerkeleyHumanoidJoystickFlatTerrain",
    "BerkeleyHumanoidJoystickRoughTerrain",
    "G1JoystickFlatTerrain",
    "G1JoystickRoughTerrain",
    "Go1JoystickFlatTerrain",
    "Go1JoystickRoughTerrain",
    "Go1Getup",
    "Go1Handstand",
    "Go1Footstand",
    "H1InplaceGaitTracking",
    "H1JoystickGaitTracking",
    "Op3Joystick",
    "SpotFlatTerrainJoystick",
    "SpotGetup",
    "SpotJoystickGaitTracking",
    "T1JoystickFlatTerrain",
    "T1JoystickRoughTerrain",
    "AlohaHandOver",
    "AlohaSinglePegInsertion",
    "PandaPickCube",
    "PandaPickCubeOrientation",
    "PandaPickCubeCartesian",
    "PandaOpenCabinet",
    "PandaRobotiqPushCube",
    "LeapCubeReorient",
    "LeapCubeRotateZAxis",
    "AeroCubeRotateZAxis",
)

# what traces the device programs of every family (the program cache's key)
BASE_DISTRIBUTIONS = ("jax", "jaxlib", "flax", "optax", "chex", "numpy", "ml_dtypes")


@dataclass(frozen=True)
class Family:
    """One env family: what every consumer needs to know of it, without importing it.

    - ``name``: the prefix of its env ids (``gymnax`` in ``gymnax/Pendulum-v1``).
    - ``adapter``: the module of a device family (``names()``, ``check(name)``,
      ``make(name) -> EnvParts``, :mod:`jaxspreeze.envs`'s contract), imported when the
      family is first used; ``""``: a host family, stepped by :mod:`jaxspreeze.host.hostenvs`.
    - ``ids``: its task names known without importing the simulator (the early check of
      ``--env``), or None (none known: the full check decides, after JAX starts).
    - ``ids_from``: the distribution and version ``ids`` were taken from
      (``("gymnax", "1.0.1")``): another version installed leaves the ids to the full
      check; None: jaxspreeze's own list, right for any version.
    - ``registry``: the module whose registry the ids come from; once it is imported in
      this process (a notebook, a test), envs registered at run time may be there and the
      full check decides.
    - ``distributions``: the distributions whose code shapes its traced programs (their
      versions are part of the program cache's key).
    - ``renderer``: how :mod:`jaxspreeze.agent.render` draws its episodes (a key of
      ``render.RENDERERS``).
    - ``suggested``: its ids are offered for an env name given without a family (a cheap
      list).
    """

    name: str
    adapter: str = ""
    ids: tuple[str, ...] | None = None
    ids_from: tuple[str, str] | None = None
    registry: str = ""
    distributions: tuple[str, ...] = ()
    renderer: str = ""
    suggested: bool = False

    @property
    def host(self) -> bool:
        """Whether its envs step on the host CPU (through the sampling workers)."""
        return not self.adapter


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "gymnax",
            adapter="jaxspreeze.envs.gymnax",
            ids=GYMNAX_NAMES,
            ids_from=("gymnax", "1.0.1"),
            registry="gymnax",
            distributions=("gymnax",),
            renderer="drawings",
            suggested=True,
        ),
        Family(
            "brax",
            adapter="jaxspreeze.envs.brax",
            ids=BRAX_NAMES,
            distributions=("brax", "mujoco", "mujoco-mjx"),
            renderer="brax",
            suggested=True,
        ),
        Family(
            "playground",
            adapter="jaxspreeze.envs.playground",
            ids=PLAYGROUND_NAMES,
            ids_from=("playground", "0.2.0"),
            registry="mujoco_playground",
            distributions=("mujoco", "mujoco-mjx", "playground"),
            renderer="playground",
        ),
        Family("gymnasium", registry="gymnasium", renderer="gymnasium"),
        Family("envpool", renderer="envpool"),
    )
}


def family(name: str) -> Family | None:
    """The family of the prefix ``name`` (``gymnax``), or None."""
    return FAMILIES.get(name)


def family_of(env: str) -> Family | None:
    """The family of the env id ``env`` (``gymnax/Pendulum-v1``), or None."""
    prefix, sep, _ = env.partition("/")
    return FAMILIES.get(prefix) if sep else None


def device_families() -> tuple[str, ...]:
    """The families whose envs step on the device, in registration order."""
    return tuple(n for n, f in FAMILIES.items() if not f.host)


def host_families() -> tuple[str, ...]:
    """The families whose envs step on the host CPU, in registration order."""
    return tuple(n for n, f in FAMILIES.items() if f.host)


def distributions() -> tuple[str, ...]:
    """Every distribution whose code shapes a traced program: :data:`BASE_DISTRIBUTIONS`
    and each family's, once each, in order."""
    out = dict.fromkeys(BASE_DISTRIBUTIONS)
    for f in FAMILIES.values():
        out.update(dict.fromkeys(f.distributions))
    return tuple(out)
