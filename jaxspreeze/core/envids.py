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
      ``render.RENDERERS``; ``"adapter"``: its adapter's ``frames(render_state, states)``
      draws them with the suite's own renderer).
    - ``suggested``: its ids are offered for an env name given without a family (a cheap
      list).
    - ``cpu_eval_episodes``: the episodes per evaluation where ``eval_episodes`` is unset
      and JAX runs on a CPU, for a family whose step is a physics simulator's (brax,
      Playground): a CPU steps a batch of 128 of them about 8x as long as a batch of 16,
      where an accelerator steps them in parallel. None: the device default (128).
    """

    name: str
    adapter: str = ""
    ids: tuple[str, ...] | None = None
    ids_from: tuple[str, str] | None = None
    registry: str = ""
    distributions: tuple[str, ...] = ()
    renderer: str = ""
    suggested: bool = False
    cpu_eval_episodes: int | None = None

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
            cpu_eval_episodes=16,
        ),
        Family(
            "playground",
            adapter="jaxspreeze.envs.playground",
            ids=PLAYGROUND_NAMES,
            ids_from=("playground", "0.2.0"),
            registry="mujoco_playground",
            distributions=("mujoco", "mujoco-mjx", "playground"),
            renderer="playground",
            cpu_eval_episodes=16,
        ),
        # craftax.craftax_env.make_craftax_env_from_name's ids (jaxspreeze.envs.craftax.NAMES)
        Family(
            "craftax",
            adapter="jaxspreeze.envs.craftax",
            ids=(
                "Craftax-Classic-Symbolic-v1",
                "Craftax-Classic-Pixels-v1",
                "Craftax-Symbolic-v1",
                "Craftax-Pixels-v1",
            ),
            ids_from=("craftax", "1.6.1"),
            distributions=("craftax",),
            renderer="adapter",
        ),
        # xminigrid.registered_environments() (xminigrid 0.9.3); the XLand-MiniGrid-R* ids
        # need a downloaded benchmark, refused by the full check
        Family(
            "xminigrid",
            adapter="jaxspreeze.envs.xminigrid",
            ids=(
                *(f"XLand-MiniGrid-R{r}-{s}x{s}" for r in (1, 2, 4) for s in (9, 11, 13, 15, 17)),
                *(f"XLand-MiniGrid-R{r}-{s}x{s}" for r, s in ((6, 13), (6, 17), (6, 19))),
                *(f"XLand-MiniGrid-R9-{s}x{s}" for s in (16, 19, 25)),
                "MiniGrid-BlockedUnlockPickUp",
                *(f"MiniGrid-DoorKey-{s}x{s}" for s in (5, 6, 8, 16)),
                *(f"MiniGrid-Empty-{s}x{s}" for s in (5, 6, 8, 16)),
                *(f"MiniGrid-EmptyRandom-{s}x{s}" for s in (5, 6, 8, 16)),
                "MiniGrid-FourRooms",
                "MiniGrid-LockedRoom",
                *(f"MiniGrid-MemoryS{s}" for s in (8, 16, 32, 64, 128)),
                "MiniGrid-Playground",
                "MiniGrid-Unlock",
                "MiniGrid-UnlockPickUp",
            ),
            ids_from=("xminigrid", "0.9.3"),
            registry="xminigrid",
            distributions=("xminigrid",),
            renderer="adapter",
        ),
        # navix.registry() (navix 0.7.4)
        Family(
            "navix",
            adapter="jaxspreeze.envs.navix",
            ids=(
                *(f"Navix-Empty-{s}x{s}-v0" for s in (5, 6, 8, 16)),
                *(f"Navix-Empty-Random-{s}x{s}-v0" for s in (5, 6, 8, 16)),
                *(f"Navix-DoorKey-{s}x{s}-v0" for s in (5, 6, 8, 16)),
                *(f"Navix-DoorKey-Random-{s}x{s}-v0" for s in (5, 6, 8, 16)),
                "Navix-FourRooms-v0",
                *(
                    f"Navix-KeyCorridorS{s}R{r}-v0"
                    for s, r in ((3, 1), (3, 2), (3, 3), (4, 3), (5, 3), (6, 3))
                ),
                *(f"Navix-LavaGapS{s}-v0" for s in (5, 6, 7)),
                *(f"Navix-SimpleCrossingS{s}N{n}-v0" for s, n in ((9, 1), (9, 2), (9, 3), (11, 5))),
                "Navix-Dynamic-Obstacles-5x5-v0",
                "Navix-Dynamic-Obstacles-5x5-Random-v0",
                "Navix-Dynamic-Obstacles-6x6-v0",
                "Navix-Dynamic-Obstacles-6x6-Random-v0",
                "Navix-Dynamic-Obstacles-8x8-v0",
                "Navix-Dynamic-Obstacles-16x16-v0",
                "Navix-DistShift1-v0",
                "Navix-DistShift2-v0",
                *(f"Navix-GoToDoor-{s}x{s}-v0" for s in (5, 6, 8)),
            ),
            ids_from=("navix", "0.7.4"),
            registry="navix",
            distributions=("navix",),
            renderer="adapter",
        ),
        Family("gymnasium", registry="gymnasium", renderer="gymnasium"),
        Family("envpool", renderer="envpool"),
        Family(
            "jumanji",
            adapter="jaxspreeze.envs.jumanji",
            # jumanji.registered_environments(), sorted; the multi-agent ids and Sokoban
            # (it downloads its levels) are refused with their reason after JAX starts
            # (jaxspreeze.envs.jumanji.REFUSED)
            ids=(
                "BinPack-v2",
                "CVRP-v1",
                "Cleaner-v0",
                "Connector-v3",
                "FlatPack-v0",
                "Game2048-v1",
                "GraphColoring-v1",
                "JobShop-v0",
                "Knapsack-v1",
                "LevelBasedForaging-v0",
                "MMST-v0",
                "Maze-v0",
                "Minesweeper-v0",
                "MultiCVRP-v0",
                "PacMan-v1",
                "RobotWarehouse-v0",
                "RubiksCube-partly-scrambled-v0",
                "RubiksCube-v0",
                "SearchAndRescue-v0",
                "SlidingTilePuzzle-v0",
                "Snake-v1",
                "Sokoban-v0",
                "Sudoku-v0",
                "Sudoku-very-easy-v0",
                "TSP-v1",
                "Tetris-v0",
            ),
            ids_from=("jumanji", "1.1.2"),
            distributions=("jumanji",),
            renderer="adapter",
        ),
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
