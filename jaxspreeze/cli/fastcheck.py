"""Checks of a command line that need no JAX and no simulator, run before either is imported.

:func:`check` reads a command's argv against static tables: every flag's name (a
misspelled one is named with the nearest flags, ``did you mean --total-steps?``), the
values of the integer, float and choice flags (``--algo``, with the nearest algorithm)
and ``--env`` (the family, and the task from a static list of the family's ids). The
first problem is one line and exit 2, without JAX started; what passes is parsed as
before, by tyro, after the command's module (and JAX) is imported.

The tables are copies: :data:`FLAGS` of the commands' tyro parsers (:func:`live_flags`
builds them again from the parsers, and ``tests/test_fast_cli.py`` compares), the env
ids of the simulators' registries (:func:`live_env_ids`). An id list is used only while
the installed simulator is the version it was taken from; another version, an env
family without a list (envpool) or a gymnasium id naming its module (``pkg.mod:Env-v0``)
is left to the full check after JAX starts (slower, never wrong). A gymnasium id is
checked against gymnasium's own registry (gymnasium imports no JAX).
"""

from __future__ import annotations

import difflib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Sequence

from jaxspreeze.cli.common import fail
from jaxspreeze.envids import BRAX_NAMES

# A flag's kind: "0" takes no value, "*" any number of values (not checked here),
# "int"/"float"/"str" one value ("int?"/"float?": or None), a tuple: one of these choices.
Kind = str | tuple[str, ...]

ALGOS = ("sac", "td3", "ddpg", "ppo", "fasttd3", "fastsac")
PLACEMENTS = ("auto", "single", "split", "data", "split-data")

# RunConfig's flags (train, autotune and launch's train arguments), in parser order.
RUN_FLAGS: dict[str, Kind] = {
    "--algo": ALGOS,
    "--env": "str",
    "--actor-obs-key": "str",
    "--critic-obs-key": "str",
    "--total-steps": "int?",
    "--num-envs": "int?",
    "--rollout-steps": "int?",
    "--grad-steps": "int?",
    "--batch-size": "int?",
    "--buffer-size": "int?",
    "--learning-starts": "int?",
    "--chunk-iterations": "int?",
    "--seed": "int",
    "--num-seeds": "int",
    "--population": "*",
    "--pbt": "0",
    "--no-pbt": "0",
    "--pbt-interval": "int",
    "--pbt-quantile": "float",
    "--placement": PLACEMENTS,
    "--host-workers": "int",
    "--host-stall-timeout-s": "float",
    "--eval-every": "int?",
    "--eval-episodes": "int",
    "--stop-at-return": "float?",
    "--logdir": "str",
    "--run-name": "str",
    "--sinks": "*",
    "--checkpoint-every": "int",
    "--keep-checkpoints": "int",
    "--replay-ratio": "float",
    "--autotune-budget-s": "float",
    "--compile-cache": "str",
    "--sac.actor-lr": "float",
    "--sac.critic-lr": "float",
    "--sac.alpha-lr": "float",
    "--sac.gamma": "float",
    "--sac.tau": "float",
    "--sac.init-alpha": "float",
    "--sac.target-entropy-scale": "float",
    "--sac.hidden": "*",
    "--sac.normalize-obs": "0",
    "--sac.no-normalize-obs": "0",
    "--td3.actor-lr": "float",
    "--td3.critic-lr": "float",
    "--td3.gamma": "float",
    "--td3.tau": "float",
    "--td3.exploration-noise": "float",
    "--td3.hidden": "*",
    "--td3.normalize-obs": "0",
    "--td3.no-normalize-obs": "0",
    "--td3.policy-delay": "int",
    "--td3.target-noise": "float",
    "--td3.target-noise-clip": "float",
    "--ddpg.actor-lr": "float",
    "--ddpg.critic-lr": "float",
    "--ddpg.gamma": "float",
    "--ddpg.tau": "float",
    "--ddpg.exploration-noise": "float",
    "--ddpg.hidden": "*",
    "--ddpg.normalize-obs": "0",
    "--ddpg.no-normalize-obs": "0",
    "--ppo.lr": "float",
    "--ppo.gamma": "float",
    "--ppo.gae-lambda": "float",
    "--ppo.clip-eps": "float",
    "--ppo.vf-coef": "float",
    "--ppo.ent-coef": "float",
    "--ppo.epochs": "int",
    "--ppo.max-grad-norm": "float",
    "--ppo.anneal-lr": "0",
    "--ppo.no-anneal-lr": "0",
    "--ppo.normalize-obs": "0",
    "--ppo.no-normalize-obs": "0",
    "--ppo.normalize-advantages": "0",
    "--ppo.no-normalize-advantages": "0",
    "--ppo.hidden": "*",
    "--ppo.policy": ("None", "clipped", "tanh"),
    "--ppo.tanh-std": ("state", "scalar"),
    "--ppo.min-std": "float",
    "--ppo.reward-scaling": "float",
    "--fasttd3.actor-lr": "float",
    "--fasttd3.critic-lr": "float",
    "--fasttd3.weight-decay": "float",
    "--fasttd3.gamma": "float",
    "--fasttd3.tau": "float",
    "--fasttd3.n-step": "int",
    "--fasttd3.num-atoms": "int",
    "--fasttd3.v-min": "float",
    "--fasttd3.v-max": "float",
    "--fasttd3.actor-hidden": "*",
    "--fasttd3.critic-hidden": "*",
    "--fasttd3.critic-layer-norm": "0",
    "--fasttd3.no-critic-layer-norm": "0",
    "--fasttd3.normalize-obs": "0",
    "--fasttd3.no-normalize-obs": "0",
    "--fasttd3.policy-delay": "int",
    "--fasttd3.target-noise": "float",
    "--fasttd3.target-noise-clip": "float",
    "--fasttd3.noise-min": "float",
    "--fasttd3.noise-max": "float",
    "--fastsac.actor-lr": "float",
    "--fastsac.critic-lr": "float",
    "--fastsac.weight-decay": "float",
    "--fastsac.gamma": "float",
    "--fastsac.tau": "float",
    "--fastsac.n-step": "int",
    "--fastsac.num-atoms": "int",
    "--fastsac.v-min": "float",
    "--fastsac.v-max": "float",
    "--fastsac.actor-hidden": "*",
    "--fastsac.critic-hidden": "*",
    "--fastsac.critic-layer-norm": "0",
    "--fastsac.no-critic-layer-norm": "0",
    "--fastsac.normalize-obs": "0",
    "--fastsac.no-normalize-obs": "0",
    "--fastsac.alpha-lr": "float",
    "--fastsac.init-alpha": "float",
    "--fastsac.target-entropy-scale": "float",
}

# train's flags (sweep takes them too)
TRAIN_FLAGS: dict[str, Kind] = {
    "--config": "str",
    "--autotune": "0",
    "--profile": "str",
    "--resume": "str",
    "--overwrite": "0",
    "--coordinator": "str",
    "--num-processes": "int?",
    "--process-id": "int?",
    **RUN_FLAGS,
}

# Each command's flags (what its tyro parser takes; positionals are left to tyro).
FLAGS: dict[str, dict[str, Kind]] = {
    "train": TRAIN_FLAGS,
    "autotune": {"--out": "str", "--config": "str", **RUN_FLAGS},
    "sweep": {
        **TRAIN_FLAGS,
        "--grid": "str",
        "--sample": "str",
        "--members": "int",
    },
    "eval": {"--episodes": "int?", "--seed": "int?", "--member": "int?", "--json": "0"},
    "render": {
        "--out": "str",
        "--seed-index": "int",
        "--member": "int?",
        "--max-steps": "int?",
        "--fps": "int",
    },
    "bench": {
        "--full": "0",
        "--out": "str",
        "--scale": ("cpu", "gpu", "None"),
        "--rounds": "int?",
        "--warmup": "int",
        "--only": "str",
        "--no-references": "0",
        "--note": "str",
        "--budget-s": "float?",
        "--list": "0",
    },
    "score": {
        "--rows": "*",
        "--list": "0",
        "--seeds": "int",
        "--sides": "*",
        "--out": "str",
        "--scale": ("cpu", "gpu"),
        "--no-warm": "0",
        "--total-steps": "int?",
        "--run-timeout-s": "float?",
        "--note": "str",
        "--merge": "*",
    },
    "launch": {
        "--processes": "int",
        "--exec-command": "0",
        "--host": "str",
        "--port": "int",
        "--devices-per-process": "int",
        "--grace-s": "float",
    },
    "plot": {"--out": "str"},
    "cache": {"--dir": "str", "--max-size": "str"},
    "envs": {},
}

# --- env ids ------------------------------------------------------------------------------

# gymnax.registered_envs (gymnax 1.0.1)
GYMNAX = (
    "1.0.1",
    (
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
    ),
)
# jaxspreeze.envs.brax.NAMES (jaxspreeze's own list: any brax version)
BRAX = (None, BRAX_NAMES)
# mujoco_playground.registry.ALL_ENVS (playground 0.2.0); whether a task's models are
# present (the Menagerie) is the full check's
PLAYGROUND = (
    "0.2.0",
    (
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
    ),
)

# family -> (distribution, (version the ids were taken from or None for any, ids));
# a family not here (envpool) or a version not matching: the full check, after JAX starts
ENV_IDS: dict[str, tuple[str | None, tuple[str | None, tuple[str, ...]]]] = {
    "gymnax": ("gymnax", GYMNAX),
    "brax": (None, BRAX),
    "playground": ("playground", PLAYGROUND),
}
FAMILIES = ("gymnax", "brax", "playground", "gymnasium", "envpool")
ENVS_HINT = "see `jaxspreeze envs {family}`"


def _did_you_mean(word: str, known: Sequence[str], n: int = 1, cutoff: float = 0.6) -> str:
    """``"; did you mean X?"`` for the nearest of ``known`` (case-insensitive), else ``""``."""
    lower: dict[str, str] = {}
    for k in known:
        lower.setdefault(k.lower(), k)
    near = difflib.get_close_matches(word.lower(), list(lower), n=n, cutoff=cutoff)
    return f"; did you mean {' or '.join(lower[m] for m in near)}?" if near else ""


def _installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


# the modules whose registries decide an env id: once one is imported in this process (a
# notebook, a test, `cli.main` called from Python), envs registered or patched in at run
# time may be there, and the full check costs no import: it decides, not the static list
REGISTRY_MODULES = {"gymnax": "gymnax", "playground": "mujoco_playground"}
ENV_REGISTRY = "jaxspreeze.envs"


def _static_ids(family: str) -> tuple[str, ...] | None:
    """The family's task names from the static list, or None (no list, another version,
    or its registry already imported here)."""
    entry = ENV_IDS.get(family)
    if entry is None:
        return None
    module = REGISTRY_MODULES.get(family)  # brax: jaxspreeze's own list, never changed
    if module is not None and (ENV_REGISTRY in sys.modules or module in sys.modules):
        return None
    distribution, (version, ids) = entry
    if version is not None and (
        distribution is None or _installed_version(distribution) != version
    ):
        return None
    return ids


def _gymnasium_ids() -> tuple[str, ...] | None:
    """gymnasium's registry (gymnasium imports no JAX), or None when not installed."""
    if importlib.util.find_spec("gymnasium") is None:
        return None  # the full check names the install command
    import gymnasium  # lazy: only for a gymnasium/ env

    return tuple(gymnasium.registry)


def check_env(name: str) -> str | None:
    """The problem with the env id ``name`` that can be known without JAX, or None."""
    family, sep, task = name.partition("/")
    if not sep or family not in FAMILIES:
        known = [f"{f}/{t}" for f in ("gymnax", "brax") for t in (_static_ids(f) or ())]
        hint = _did_you_mean(name, [*known, *(f"{f}/" for f in FAMILIES)])
        if not hint:
            hint = _did_you_mean(
                name, [k for k in known if k.partition("/")[2].lower() == name.lower()], cutoff=0
            )
        return (
            f"--env: unknown environment {name!r}: names are <family>/<task> with family "
            f"one of {', '.join(FAMILIES)} (see `jaxspreeze envs`){hint}"
        )
    if not task:
        return f"--env: {name!r} names no task; {ENVS_HINT.format(family=family)}"
    if family == "gymnasium":
        if ":" in task:
            return None  # importing its module registers the id: the full check
        ids = _gymnasium_ids()
    else:
        ids = _static_ids(family)
    if ids is None or task in ids:
        return None
    hint = _did_you_mean(name, [f"{family}/{t}" for t in ids])
    return f"--env: unknown environment {name!r}{hint} ({ENVS_HINT.format(family=family)})"


# --- flags --------------------------------------------------------------------------------


def _value_problem(flag: str, kind: Kind, value: str) -> str | None:
    """What is wrong with ``value`` for a flag of ``kind`` (as tyro would refuse it), or None."""
    if isinstance(kind, tuple):
        if value in kind:
            return None
        what = "algorithm" if flag == "--algo" else "choice"
        return (
            f"{flag}: unknown {what} {value!r}{_did_you_mean(value, kind)} "
            f"(choose one of {', '.join(k for k in kind if k != 'None')})"
        )
    base = kind.rstrip("?")
    if base not in ("int", "float") or (kind.endswith("?") and value == "None"):
        return None
    try:
        int(value) if base == "int" else float(value)
    except ValueError:
        a = "an integer" if base == "int" else "a number"
        return f"{flag}: expected {a}{' or None' if kind.endswith('?') else ''}, got {value!r}"
    return None


def check_flags(argv: Sequence[str], flags: dict[str, Kind], prog: str) -> str | None:
    """The first problem with ``argv``'s flags and simple values, or None.

    Only ``--name`` tokens are read as flags (``_`` read as ``-``, as tyro does); the token
    after a one-value flag is its value, so ``--totl-steps 100`` names one unknown flag.
    """
    i = 0
    argv = list(argv)
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--") or token in ("--", "--debug"):
            continue
        name, eq, value = token.partition("=")
        name = "--" + name[2:].replace("_", "-")
        kind = flags.get(name)
        if kind is None:
            return (
                f"unknown flag {token.partition('=')[0]}{_did_you_mean(name, list(flags))} "
                f"(see `{prog} --help`)"
            )
        if kind in ("0", "*"):
            continue
        if not eq:
            if i >= len(argv) or (argv[i].startswith("--") and len(argv[i]) > 2):
                return f"{name}: missing its value (see `{prog} --help`)"
            value = argv[i]
            i += 1
        if problem := _value_problem(name, kind, value):
            return problem if isinstance(kind, tuple) else f"{problem} (see `{prog} --help`)"
        if name == "--env" and (problem := check_env(value)):
            return problem
    return None


def check(command: str, argv: Sequence[str]) -> int | None:
    """Check a command's argv before its module (and JAX) is imported: exit code 2 after
    one line for the first problem found, None when the full parse should go on."""
    flags = FLAGS.get(command)
    if flags is None:
        return None
    own, rest = list(argv), []
    if command == "launch" and "--" in own:
        cut = own.index("--")
        own, rest = own[:cut], own[cut + 1 :]
    if "-h" in own or "--help" in own:
        return None  # tyro prints the help
    problem = check_flags(own, flags, f"jaxspreeze {command}")
    if problem is None and command == "launch" and "--exec-command" not in own:
        train = rest[1:] if rest[:1] == ["train"] else rest
        if "-h" not in train and "--help" not in train:
            problem = check_flags(train, FLAGS["train"], "jaxspreeze train")
    return None if problem is None else fail(problem)


# --- the sources of the tables (these import the parsers and simulators; for the tests) ---


def live_flags(command: str) -> dict[str, Kind]:
    """The flags of ``command``'s tyro parser as :data:`FLAGS` writes them (imports JAX)."""
    import importlib
    import warnings

    import tyro

    module = importlib.import_module(f"jaxspreeze.cli.{command}")
    cls = next(
        v
        for k, v in vars(module).items()
        if k.endswith("Args") and isinstance(v, type) and v.__module__ == module.__name__
    )
    kwargs = {"config": tuple(getattr(module, "FLAGS", ()))}
    if command in ("train", "autotune", "sweep"):
        from jaxspreeze.config import RunConfig

        kwargs["default"] = cls(run=RunConfig())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parser = tyro.extras.get_parser(cls, **kwargs)
    out: dict[str, Kind] = {}
    for action in parser._actions:
        if not action.option_strings or "--help" in action.option_strings:
            continue
        metavar = str(action.metavar)
        if action.nargs == 0:
            kind: Kind = "0"
        elif action.choices is not None:
            kind = tuple(str(c) for c in action.choices)
        elif action.nargs in ("*", "+"):
            kind = "*"
        elif metavar in ("INT", "FLOAT", "{None}|INT", "{None}|FLOAT"):
            kind = metavar.removeprefix("{None}|").lower() + ("?" if "None" in metavar else "")
        elif metavar.startswith("{") and "|" not in metavar:
            kind = tuple(metavar.strip("{}").split(","))
        else:
            kind = "str"
        for option in action.option_strings:
            out[option] = kind
    return out


def live_env_ids(family: str) -> tuple[str, ...]:
    """The task names of ``family``'s own registry (imports the simulator)."""
    if family == "gymnax":
        import gymnax

        return tuple(gymnax.registered_envs)
    if family == "brax":
        from jaxspreeze.envs import brax

        return tuple(brax.NAMES)
    if family == "playground":
        from jaxspreeze.envs import playground

        return tuple(playground.names())
    raise ValueError(family)
