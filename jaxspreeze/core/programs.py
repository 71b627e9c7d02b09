"""Compiled programs kept across processes: a second run of the same config skips tracing.

JAX's persistent compilation cache (``--compile-cache``) skips XLA's compile on a second
run, not the Python trace and the lowering of each program, which are most of what is left
of a warm start (brax/inverted_pendulum TD3 on a 2-core CPU: about 12 of 24 seconds from
the command to the first chunk). A :class:`ProgramCache` keeps each compiled program
itself (``jax.experimental.serialize_executable``) in ``<compile cache>/programs/`` and
loads it back in a later process instead of tracing, lowering and compiling it again.

A program is found again only when everything that went into its trace is the same. Its
key holds:

- the run (the caller's ``run``; :func:`jaxspreeze.run.caches.program_run`): the config's fields that
  reach a program (not the seed, which programs take as keys, nor the run's name,
  directory, sinks, checkpointing and cache directory), the schedule, the placement, and
  the env object's classes (their source files' contents, their packages' files by size
  and time);
- the code: the contents of jaxspreeze's own source files, the versions of the
  distributions that trace (jax, jaxlib, flax, optax, chex, numpy, ml_dtypes and each env
  family's: ``envids.FAMILIES``) and the size and modification time of every Python
  file of the packages that trace (an edited library, an editable install);
- the machine: the backend, its version, the devices, the CPU's model and features and
  an accelerator's driver version (:func:`jaxspreeze.core.cachedir.cpu_identity`: a
  program built for another CPU dies at its first instruction), ``XLA_FLAGS`` and JAX's
  settings (those not about caches, logs or dumps);
- the program: its name, the shapes, dtypes, weak types and placements of its
  arguments, with their tree structure, and XLA's compile options it is built with
  (:func:`compile_options`: a run's ``--compile`` mode).

Anything else is not seen: a program whose trace depends on a module-level value changed
at run time (a monkeypatched function, a registry edited in place) is found again as it
was. Such code sets ``JAXSPREEZE_PROGRAM_CACHE=off`` (the test suite does); a config with
``--compile-cache off`` keeps nothing either. Only programs on one device are kept (a
multi-device executable must be loaded onto its devices in their mesh order, which the
serialized form does not carry): the data-parallel programs are traced every run. Nor are
programs whose custom calls another process may not have (host callbacks: their Python
functions live in the process that compiled them); LAPACK's CPU kernels, which JAX sets
up only when it lowers a program that calls them, are set up before such a program loads.
A program that JAX's persistent cache gave is used and not kept: XLA's CPU client cannot
serialize it again (its kernels are missing from the copy), hence the names of
:meth:`ProgramCache.jit`.

A kept program is machine code that runs when loaded, so it is verified first. Each entry
starts with a header line holding the SHA-256 and length of what follows (written with it
in one atomic rename); an entry whose bytes do not match (flipped, truncated), that does not
load, or whose load or first execution killed an earlier process (a ``.loading-<pid>`` or
``.running-<pid>`` mark left beside it by a process that no longer runs: :class:`FirstRun`)
is discarded with one warning line, and the program is compiled (past JAX's cache, which
would give a copy XLA cannot keep: a ``.discarded`` mark says so to any later process) and
kept again.
Programs are loaded only from a directory the user owns and nobody else can write
(:func:`jaxspreeze.core.cachedir.distrust`); otherwise every program is compiled and none kept,
with one warning line saying why. After each program kept, the cache directory is held
under its size cap (:func:`jaxspreeze.core.cachedir.max_size`, least recently used first). The
cache never fails a run.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import inspect
import os
import pickle
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import jax
from jax._src import config as jax_config

from jaxspreeze.core import cachedir, envids

ENV_VAR = "JAXSPREEZE_PROGRAM_CACHE"  # "off": trace every program, keep none
FORMAT = cachedir.FORMAT
SUFFIX = cachedir.PROGRAM_SUFFIX
_MARK = ".loading-"  # ".<entry>.loading-<pid>": a process is loading the entry
_RUN_MARK = ".running-"  # ".<entry>.running-<pid>": a process runs the loaded entry first
_DISCARDED = ".discarded"  # ".<entry>.discarded": compile past JAX's cache, keep it again
# the distributions whose code or build shapes a traced program: JAX's and each env
# family's (envids.FAMILIES), read when a key is made
distributions = envids.distributions
# packages whose Python files are fingerprinted by size and time (besides the env's)
TRACED_PACKAGES = ("jax", "flax", "optax", "chex")
_UNKEYED_SETTINGS = ("cache", "log", "dump", "traceback", "pprint", "explain", "timeout")
# a run's compile modes (RunConfig.compile, resolved by the plan): "full" optimises every
# program for run speed (XLA's defaults); "quick" compiles every program for compile speed
# with QUICK_OPTIONS (XLA's CPU backend only: a run on an accelerator is "full").
# XLA CPU's legacy fusion emitters and LLVM at optimisation level 1: the default job's
# chunk compiles in half the CPU seconds and runs about as fast (0.9-1.1x; DQN's 0.88x),
# the init, warm-up and evaluation in 0.5-0.7 of theirs
# (experiments/results/cold_start_cpu.md). The fused kernels round otherwise: a quick
# program's floats differ from a full one's in their last bits
QUICK_OPTIONS: dict[str, Any] = {
    "xla_cpu_use_fusion_emitters": False,
    "xla_backend_optimization_level": 1,
}


def enabled() -> bool:
    """False when ``JAXSPREEZE_PROGRAM_CACHE=off``."""
    return os.environ.get(ENV_VAR, "").strip().lower() not in ("off", "0", "false", "no")


# the programs a run calls once and that step no env loop (the init: parameters, optimiser
# states, the envs' first reset): on XLA's CPU backend compiled at LLVM level 0 in every
# mode, a fifth of the full compile and half the quick one (SAC's default job 3.0 / 0.85 /
# 0.45 s; TD3 brax/inverted_pendulum 6.5 / 3.3 / 1.5 s), run in milliseconds either way.
# Its kernels round otherwise: initial parameters differ from a full program's in the
# last bit of some leaves (experiments/results/cold_start_cpu.md). The warm-up steps its
# envs for learning_starts steps, 4x slower at level 0 on brax: it keeps the run's mode.
ONCE_PROGRAMS = ("init",)
ONCE_OPTIONS: dict[str, Any] = {**QUICK_OPTIONS, "xla_backend_optimization_level": 0}


def compile_options(mode: str = "full", cpu: bool = False) -> Callable[[str], dict[str, Any]]:
    """XLA compile options by program name for a run's compile ``mode``:
    :data:`QUICK_OPTIONS` for every program when ``"quick"``, none (XLA's defaults: full
    optimisation) otherwise (``"full"``, or an ``"auto"`` no plan resolved); on a CPU
    (``cpu``: every device of the run is one) :data:`ONCE_OPTIONS` for the
    :data:`ONCE_PROGRAMS` in every mode."""
    quick = mode == "quick"

    def options(name: str) -> dict[str, Any]:
        if cpu and name in ONCE_PROGRAMS:
            return dict(ONCE_OPTIONS)
        return dict(QUICK_OPTIONS) if quick else {}

    return options


def _digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
        h.update(b"\0")
    return h.hexdigest()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def _package_dir(name: str) -> Path | None:
    module = sys.modules.get(name)
    files = getattr(module, "__path__", None) if module is not None else None
    return Path(next(iter(files))) if files else None


def _contents(directory: Path) -> str:
    """A digest of the contents of every Python file under ``directory``."""
    h = hashlib.sha256()
    for path in sorted(directory.rglob("*.py")):
        h.update(str(path.relative_to(directory)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _stats(directory: Path) -> str:
    """A digest of the path, size and modification time of every Python file under it."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(root, name))
                h.update(f"{root}/{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


_LOCK = threading.Lock()
# XLA's executable (de)serialization is not safe from several threads at once (the CPU
# client crashes); the trainer loads the evaluation beside the chunk and the warm-up
_SERIALIZE_LOCK = threading.Lock()


def code_fingerprint() -> str:
    """jaxspreeze's own sources, the tracing distributions' versions and files, the machine
    and JAX's settings, as they are now (about 50 ms: read once per run)."""
    own = Path(__file__).resolve().parents[1]  # the jaxspreeze package
    packages = {p: _stats(d) for p in TRACED_PACKAGES if (d := _package_dir(p))}
    settings = {
        k: repr(v)
        for k, v in sorted(jax.config.values.items())
        if not any(word in k for word in _UNKEYED_SETTINGS)
    }
    backend = jax.devices()[0].client
    machine = (
        jax.default_backend(),
        backend.platform_version,
        cachedir.cpu_identity(),  # the CPU's model and features: XLA builds for them
        cachedir.driver_version() if jax.default_backend() != "cpu" else "-",
        [(d.id, d.device_kind, d.process_index) for d in jax.devices()],
        jax.process_count(),
        jax.process_index(),
        os.environ.get("XLA_FLAGS", ""),
    )
    versions = {d: _version(d) for d in distributions()}
    return _digest(FORMAT, _contents(own), versions, packages, settings, machine)


def object_fingerprint(objects: Iterable[Any]) -> str:
    """The classes of ``objects`` (e.g. the env a family built): every class of each one's
    MRO, by name and the contents of its module's file, and the files of their packages by
    size and time. An object of a builtin type adds its type's name only."""
    parts: list[Any] = []
    packages: set[str] = set()
    for obj in objects:
        for cls in type(obj).__mro__:
            module = sys.modules.get(cls.__module__)
            try:
                source = inspect.getsourcefile(module) if module is not None else None
            except TypeError:  # a builtin module
                source = None
            text = Path(source).read_bytes() if source and os.path.exists(source) else b""
            parts.append((cls.__module__, cls.__qualname__, hashlib.sha256(text).hexdigest()))
            packages.add(cls.__module__.partition(".")[0])
    trees = {p: _stats(d) for p in sorted(packages) if (d := _package_dir(p))}
    return _digest(parts, trees)


def signature(args: tuple[Any, ...]) -> str:
    """The tree structure and each leaf's shape, dtype, weak type and placement."""
    leaves, tree = jax.tree.flatten(args)
    rows = [str(tree)]
    for x in leaves:
        rows.append(
            (
                tuple(getattr(x, "shape", ())),
                str(getattr(x, "dtype", type(x).__name__)),
                bool(getattr(x, "weak_type", False)),
                repr(getattr(x, "sharding", None)),
            )
        )
    return _digest(rows)


def _device_ids(compiled: jax.stages.Compiled) -> list[int]:
    ids: set[int] = set()
    shardings = (compiled.input_shardings, compiled.output_shardings)
    for sharding in jax.tree.leaves(shardings):
        ids |= {d.id for d in sharding.device_set}
    return sorted(ids)


class ProgramCache:
    """Compiled programs of one run, kept in ``directory`` (None: kept nowhere).

    ``run`` says what the run's programs are made of beyond the code (see the module's
    docstring); two caches with the same ``run`` share entries. ``options(name)`` gives
    the XLA compile options of the program ``name`` (default :func:`compile_options`'s
    full optimisation; a schedule's are its run's ``--compile`` mode's); they are part of
    the kept program's key. :meth:`jit` names a
    program, :meth:`compile` lowers and compiles it, or loads the program a previous
    process kept for the same key. ``loaded`` and ``compiled`` name the programs of each
    kind; ``load_s`` is the seconds spent loading.

    A kept program is named ``<name>_<namespace>``, the namespace a digest of the code
    and the run: the module's name is part of JAX's persistent-cache key, so a program
    compiled for a new namespace is compiled by XLA, not read from JAX's cache (XLA's CPU
    client cannot serialize again an executable it read from that cache). A compile that
    is answered by JAX's cache all the same is used and not kept.
    """

    def __init__(
        self,
        directory: str | Path | None,
        run: Any = (),
        label: str = "",
        warn: Callable[[str], None] | None = None,
        options: Callable[[str], dict[str, Any]] | None = None,
    ) -> None:
        self.directory = Path(directory) if directory is not None and enabled() else None
        self._run = run
        # XLA's compile options of each program, by name (part of a kept program's key)
        self.options = options if options is not None else compile_options()
        # told (name, "compiled" or "loaded", seconds) as each program is ready (the
        # start's progress lines; any thread)
        self.on_ready: Callable[[str, str, float], None] | None = None
        self.label = label  # what the entries are for, in words (``jaxspreeze cache`` lists it)
        self._warn = warn or _warn
        self._namespace: str | None = None
        self.loaded: list[str] = []
        self.compiled: list[str] = []
        self.discarded: list[str] = []
        self.load_s = 0.0
        self._lock = threading.Lock()
        self._fresh: set[Path] = set()  # discarded: compile past JAX's cache, keep again
        if self.directory is not None and (why := cachedir.distrust(self.directory)):
            self._warn(f"kept programs not loaded nor kept: {why}")
            self.directory = None

    @classmethod
    def off(cls, options: Callable[[str], dict[str, Any]] | None = None) -> ProgramCache:
        """A cache that keeps nothing: every program is traced and compiled (with
        ``options``, default full optimisation)."""
        return cls(None, options=options)

    @property
    def on(self) -> bool:
        """True when programs are kept."""
        return self.directory is not None

    @property
    def namespace(self) -> str:
        """The digest of the code and the run that every key of this cache starts from."""
        if self._namespace is None:
            self._namespace = _digest(code_fingerprint(), self._run)
        return self._namespace

    def jit(self, name: str, fn: Callable[..., Any], donate: tuple[int, ...] = ()) -> Any:
        """``jax.jit(fn, donate_argnums=donate)`` as the program ``name`` (with this
        cache's namespace when it keeps programs: see the class docstring)."""
        label = f"{name}_{self.namespace[:12]}" if self.on else name

        def program(*args: Any) -> Any:
            return fn(*args)

        program.__name__ = program.__qualname__ = label
        return jax.jit(program, donate_argnums=donate)

    def _path(self, name: str, args: tuple[Any, ...]) -> Path:
        assert self.directory is not None
        options = sorted(self.options(name).items())
        parts = (self.namespace, name, signature(args), *([options] if options else []))
        key = _digest(*parts)[:40]
        return self.directory / f"{name}-{key}{SUFFIX}"

    def load(self, name: str, *args: Any) -> jax.stages.Compiled | None:
        """The program kept for ``name`` called on ``args`` (arrays or abstract), or None.
        A damaged entry, or one whose load killed an earlier process, is discarded."""
        if self.directory is None:
            return None
        path = self._path(name, args)
        start = time.perf_counter()
        try:
            if crash := _crashed(path):
                return self._discard(name, path, f"a process died while {crash}")
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            return self._discard(name, path, f"it cannot be read ({e.strerror})")
        payload, why = cachedir.verified(data)
        if payload is None:
            return self._discard(name, path, why)
        mark = path.with_name(f".{path.name}{_MARK}{os.getpid()}")
        try:
            with contextlib.suppress(OSError):
                mark.touch()
            program = FirstRun(_deserialize(payload), path)
        except Exception as e:  # from another build, or its kernels are missing here
            return self._discard(name, path, f"it does not load ({type(e).__name__})")
        finally:
            mark.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            os.utime(path)  # its last use: the size cap evicts the least recently used
        with self._lock:
            self.loaded.append(name)
            self.load_s += time.perf_counter() - start
        return program

    def _discard(self, name: str, path: Path, why: str) -> None:
        """Remove a bad entry (one warning line); the program is compiled and kept again."""
        for p in (path, *_marks(path)):
            with contextlib.suppress(OSError):
                p.unlink()
        with contextlib.suppress(OSError):  # any process compiles it past JAX's cache
            _discarded(path).touch()
        with self._lock:
            self.discarded.append(name)
            self._fresh.add(path)
        self._warn(f"kept program {path.name} discarded: {why}; compiling it again")
        return None

    def store(
        self, name: str, args: tuple[Any, ...], program: jax.stages.Compiled, lapack: bool = False
    ) -> bool:
        """Keep ``program`` for ``name`` on ``args`` (``lapack``: it calls LAPACK's kernels);
        False when it is not kept (off, a multi-device program, one that does not
        serialize, an unwritable directory)."""
        if self.directory is None:
            return False
        ids = _device_ids(program)
        if len(ids) != 1:
            return False
        try:
            from jax.experimental import serialize_executable

            with _SERIALIZE_LOCK:
                serialized, in_tree, out_tree = serialize_executable.serialize(program)
                payload = pickle.dumps((serialized, in_tree, out_tree, ids, lapack))
            path = self._path(name, args)
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(cachedir.header(payload, name, self.label))
                    f.write(payload)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except Exception:
            return False
        with contextlib.suppress(OSError):
            _discarded(path).unlink(missing_ok=True)  # kept again
        limit = cachedir.max_size()
        if limit is not None and self.directory.name == cachedir.PROGRAMS:
            with contextlib.suppress(OSError):
                cachedir.evict(self.directory.parent, limit, keep=path)
        return True

    def compile(self, name: str, jitted: Any, *args: Any) -> jax.stages.Compiled:
        """``jitted.lower(*args).compile()`` (``jitted`` from :meth:`jit` with the same
        ``name``), or the program kept for it; a program XLA compiled is then kept."""
        start = time.perf_counter()
        program = self.load(name, *args)
        if program is not None:
            self._ready(name, "loaded", start)
            return program
        return self.compile_lowered(name, jitted.lower(*args), args, start)

    def _ready(self, name: str, how: str, start: float) -> None:
        hook = self.on_ready
        if hook is not None:
            hook(name, how, time.perf_counter() - start)

    def compile_lowered(
        self,
        name: str,
        lowered: jax.stages.Lowered,
        args: tuple[Any, ...],
        start: float | None = None,
    ) -> jax.stages.Compiled:
        """Compile ``lowered`` (the program ``name`` lowered for ``args``) and keep it when
        XLA compiled it (not JAX's cache) and another process can load it. ``start``
        (a ``time.perf_counter()``): when its trace began, for :attr:`on_ready`."""
        start = time.perf_counter() if start is None else start
        # a discarded entry (here or by an earlier process): JAX's copy could not be kept
        path = self._path(name, args) if self.on else None
        past_jax_cache = path is not None and (path in self._fresh or _discarded(path).exists())
        options = self.options(name)  # JAX's persistent cache keys them too
        with _persistent_cache_hits() as hits:
            if past_jax_cache:
                with jax_config.enable_compilation_cache(False):
                    program = lowered.compile(compiler_options=options or None)
            else:
                program = lowered.compile(compiler_options=options or None)
        with self._lock:
            self.compiled.append(name)
        self._ready(name, "compiled", start)
        if self.on and not hits:
            calls = custom_calls(lowered.as_text())
            if loadable(calls):
                self.store(name, args, program, lapack=any(c.startswith("lapack_") for c in calls))
        return program

    def report(self) -> dict[str, Any]:
        """What the summary records: where, and which programs were loaded or compiled."""
        with self._lock:
            return {
                "program_cache": str(self.directory) if self.directory is not None else None,
                "programs_loaded": sorted(self.loaded),
                "programs_compiled": sorted(self.compiled),
                "programs_load_s": self.load_s,
                "programs_discarded": sorted(self.discarded),
            }


# custom calls a kept program may hold: XLA's own and those whose kernels exist as soon
# as jax is imported, or that _deserialize readies (LAPACK's, set up lazily when a
# program using them is first lowered: a program loaded before that crashes). Host
# callbacks never: their functions live in the process that compiled them.
_LOADABLE_CALLS = ("lapack_", "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
                   "annotate_device_placement", "cu_threefry2x32")  # fmt: skip
_CUSTOM_CALL = re.compile(r'custom_call\s*@([\w.$-]+)|call_target_name\s*=\s*"([^"]+)"')


def custom_calls(module_text: str) -> set[str]:
    """The custom-call targets of a lowered module (``Lowered.as_text()``)."""
    return {a or b for a, b in _CUSTOM_CALL.findall(module_text)}


def loadable(calls: set[str]) -> bool:
    """True when a program making the custom ``calls`` (:func:`custom_calls`) can be loaded
    in another process: every one is a call :data:`_LOADABLE_CALLS` allows."""
    return all(c.startswith(_LOADABLE_CALLS) and "callback" not in c for c in calls)


_RUNNING: set[Path] = set()  # this process's first-run marks still on disk


class FirstRun:
    """A loaded program whose first execution is marked on disk: ``.<entry>.running-<pid>``
    lies beside its entry from the call until its outputs are ready (the call waits for
    them, once), so that an entry whose code kills the process (SIGILL: built for another
    CPU; a crash in the program) is discarded by the next process instead of killing it
    too. Anything else is the compiled program's (``out_info``, ...)."""

    def __init__(self, program: jax.stages.Compiled, entry: Path) -> None:
        self._program = program
        self._entry: Path | None = entry  # None once the first execution has finished
        self._first = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        if self._entry is None:
            return self._program(*args)
        with self._first:
            if self._entry is None:
                return self._program(*args)
            mark = self._entry.with_name(f".{self._entry.name}{_RUN_MARK}{os.getpid()}")
            with contextlib.suppress(OSError):
                mark.touch()
            _RUNNING.add(mark)
            try:
                return jax.block_until_ready(self._program(*args))
            finally:  # finished, or refused its arguments (an error, no crash)
                self._entry = None
                _RUNNING.discard(mark)
                mark.unlink(missing_ok=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._program, name)


def release_marks() -> None:
    """Remove this process's first-run marks (a process about to end by a signal or
    ``os._exit`` on purpose: a stop is not a crash of the program it ran)."""
    for mark in list(_RUNNING):
        _RUNNING.discard(mark)
        with contextlib.suppress(OSError):
            mark.unlink()


class Piece:
    """One program for ``args``, from the cache or lowered: ``out_info`` (its outputs'
    shapes, to lower what follows it) before ``compile()`` either way."""

    def __init__(
        self,
        programs: ProgramCache,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        donate: tuple[int, ...] = (),
    ) -> None:
        self._programs, self._name, self._args = programs, name, args
        self._start = time.perf_counter()
        self._program = programs.load(name, *args)
        self._lowered = None
        if self._program is not None:
            programs._ready(name, "loaded", self._start)
        else:
            self._lowered = programs.jit(name, fn, donate).lower(*args)
        self.out_info = (self._program or self._lowered).out_info

    def compile(self) -> jax.stages.Compiled:
        """The compiled program (compiled and kept at the first call when not loaded)."""
        if self._program is None:
            self._program = self._programs.compile_lowered(
                self._name, self._lowered, self._args, self._start
            )
        return self._program


_HITS = threading.local()  # this thread's count of JAX persistent-cache hits, when counting
_LISTENING = False


def _on_event(event: str, **kwargs: Any) -> None:
    if event == "/jax/compilation_cache/cache_hits" and getattr(_HITS, "count", None) is not None:
        _HITS.count += 1


@contextlib.contextmanager
def _persistent_cache_hits() -> Iterator[list[int]]:
    """Counts this thread's JAX persistent-cache hits inside the block: the list holds one
    entry per hit when the block ends (JAX reports each hit on the compiling thread)."""
    global _LISTENING
    with _LOCK:
        if not _LISTENING:
            jax.monitoring.register_event_listener(_on_event)
            _LISTENING = True
    hits: list[int] = []
    _HITS.count = 0
    try:
        yield hits
    finally:
        hits.extend([1] * _HITS.count)
        _HITS.count = None


def _deserialize(data: bytes) -> jax.stages.Compiled:
    """A kept program, loaded onto the devices it was compiled for (one thread at a time:
    unpickling its trees beside another thread's executable load crashes as well)."""
    from jax.experimental import serialize_executable

    with _SERIALIZE_LOCK:
        serialized, in_tree, out_tree, ids, lapack = pickle.loads(data)
        if lapack and not _ready_lapack():
            raise RuntimeError("LAPACK's kernels cannot be set up here: compile instead")
        by_id = {d.id: d for d in jax.devices()}
        return serialize_executable.deserialize_and_load(
            serialized, in_tree, out_tree, execution_devices=[by_id[i] for i in ids]
        )


def _ready_lapack() -> bool:
    """Set up the LAPACK kernels a loaded program calls (JAX does it when it lowers a
    program that uses them, which a loaded program skips; without it the call crashes).
    False where this JAX has no such set-up: the program is compiled instead."""
    try:
        from jax._src.lax import linalg

        linalg.initialize_lapack()
    except Exception:
        return False
    return True


def _warn(message: str) -> None:
    print(f"jaxspreeze: warning: {message}", file=sys.stderr, flush=True)


def _marks(path: Path) -> list[Path]:
    """The crash marks beside ``path``'s entry: a process loading it, or running it first."""
    return [m for kind in (_MARK, _RUN_MARK) for m in path.parent.glob(f".{path.name}{kind}*")]


def _discarded(path: Path) -> Path:
    return path.with_name(f".{path.name}{_DISCARDED}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _crashed(path: Path) -> str | None:
    """How a process that no longer runs died of ``path``'s entry (a mark it left: its
    load or its first execution killed it), or None: using it again would kill this one
    too."""
    for mark in _marks(path):
        kind = _MARK if _MARK in mark.name else _RUN_MARK
        pid = mark.name.rpartition(kind)[2]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            return "loading it" if kind == _MARK else "running it for the first time"
    return None
