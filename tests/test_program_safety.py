"""Kept programs cannot crash a run: verified before they load, discarded when damaged or
when their load killed a process, loaded only from a directory nobody else can write; the
cache directory is listed, cleared and held under a size cap (``jaxspreeze cache``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import compilation_cache

from jaxspreeze.cli import main as cli_main
from jaxspreeze.core import cachedir, programs
from jaxspreeze.core.programs import ProgramCache

FN = staticmethod(lambda x: jnp.sin(x) * 2 + 1)
X = jnp.arange(8.0)


@pytest.fixture
def cache_on(monkeypatch):
    monkeypatch.setenv("JAXSPREEZE_PROGRAM_CACHE", "on")


@pytest.fixture
def jax_cache(tmp_path):
    """JAX's persistent cache on, in this test's own directory (so a discarded program's
    compile would be answered by JAX's copy, which XLA cannot keep again)."""
    before = {k: jax.config.values[k] for k in _JAX_KEYS}
    compilation_cache.reset_cache()
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "xla"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    yield tmp_path / "xla"
    compilation_cache.reset_cache()
    for k, v in before.items():
        jax.config.update(k, v)


_JAX_KEYS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


def _kept(tmp_path, run):
    """A cache, its directory and the one entry it kept for ``FN`` on ``X``."""
    directory = tmp_path / "xla" / "programs"
    cache = ProgramCache(directory, run)
    cache.compile("f", cache.jit("f", FN), X)
    (entry,) = directory.glob(f"*{programs.SUFFIX}")
    return directory, entry


def _again(directory, run, capsys):
    """A new cache over ``directory``: (cache, program, the warning lines it printed)."""
    cache = ProgramCache(directory, run)
    program = cache.compile("f", cache.jit("f", FN), X)
    err = capsys.readouterr().err
    return cache, program, [line for line in err.splitlines() if "warning" in line]


def _damaged_then_kept_again(tmp_path, capsys, run, damage, why):
    directory, entry = _kept(tmp_path, run)
    capsys.readouterr()
    damage(entry)
    cache, program, warnings = _again(directory, run, capsys)
    assert cache.loaded == [] and cache.compiled == ["f"] and cache.discarded == ["f"]
    (line,) = warnings
    assert entry.name in line and why in line and "compiling it again" in line
    np.testing.assert_allclose(program(X), FN(X))
    third, _, warnings = _again(directory, run, capsys)  # kept again, past JAX's cache
    assert third.loaded == ["f"] and warnings == []


def test_flipped_bytes_in_the_code_are_caught_before_the_program_loads(
    tmp_path, capsys, cache_on, jax_cache
):
    def flip(entry):
        data = bytearray(entry.read_bytes())
        middle = len(data) // 2  # inside the serialized executable's machine code
        data[middle : middle + 8] = bytes(b ^ 0xFF for b in data[middle : middle + 8])
        entry.write_bytes(bytes(data))

    _damaged_then_kept_again(tmp_path, capsys, ("flip", str(tmp_path)), flip, "checksum")


def test_a_truncated_program_is_discarded_and_kept_again(tmp_path, capsys, cache_on, jax_cache):
    def truncate(entry):
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])

    _damaged_then_kept_again(tmp_path, capsys, ("cut", str(tmp_path)), truncate, "truncated")


def test_an_entry_of_another_format_is_discarded(tmp_path, capsys, cache_on):
    _damaged_then_kept_again(
        tmp_path,
        capsys,
        ("old", str(tmp_path)),
        lambda entry: entry.write_bytes(b"\x80\x04not a program of this format"),
        "no valid header",
    )


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import jax.numpy as jnp
    from jaxspreeze import programs
    if sys.argv[2] == "crash":
        programs._deserialize = lambda data: os.kill(os.getpid(), signal.SIGKILL)
    cache = programs.ProgramCache(sys.argv[1], ("crash",))
    fn = lambda x: jnp.sin(x) * 2 + 1
    program = cache.compile("f", cache.jit("f", fn), jnp.arange(8.0))
    print(cache.report()["programs_loaded"], cache.report()["programs_discarded"])
    """
)


def test_a_program_whose_load_killed_a_process_is_discarded_by_the_next(tmp_path):
    """Three processes: one keeps the program, the next dies (SIGKILL) while loading it,
    the third discards it with one warning line instead of dying too, and keeps it again."""
    directory = tmp_path / "xla" / "programs"
    env = {**os.environ, "JAXSPREEZE_PROGRAM_CACHE": "on", "JAX_PLATFORMS": "cpu"}
    run = lambda how: subprocess.run(
        [sys.executable, "-c", CHILD, str(directory), how], env=env, capture_output=True, text=True
    )
    assert run("keep").returncode == 0
    (entry,) = directory.glob(f"*{programs.SUFFIX}")
    crashed = run("crash")
    assert crashed.returncode == -9  # the load killed it; its mark stays
    (mark,) = programs._marks(entry)
    assert mark.name.startswith(f".{entry.name}.loading-")
    third = run("load")
    assert third.returncode == 0 and third.stdout.split("\n")[0] == "[] ['f']"
    (line,) = [x for x in third.stderr.splitlines() if "warning" in x]
    assert "died while loading" in line and entry.name in line
    assert programs._marks(entry) == [] and entry.exists()  # kept again
    assert run("load").stdout.startswith("['f'] []")


def test_a_mark_of_a_process_still_running_is_not_a_crash(tmp_path, capsys, cache_on):
    run = ("alive", str(tmp_path))
    directory, entry = _kept(tmp_path, run)
    mark = entry.with_name(f".{entry.name}.loading-{os.getppid()}")  # pytest's parent: alive
    mark.touch()
    cache, _, warnings = _again(directory, run, capsys)
    assert cache.loaded == ["f"] and warnings == [] and mark.exists()


FIRST_RUN = textwrap.dedent(
    """
    import os, sys
    import jax.numpy as jnp
    from jaxspreeze.core import programs
    if sys.argv[2] == "abort":  # a kept program whose code kills the process when it runs
        real = programs._deserialize

        class Aborts:
            def __init__(self, program):
                self.out_info = program.out_info

            def __call__(self, *args):
                os.abort()

        programs._deserialize = lambda data: Aborts(real(data))
    cache = programs.ProgramCache(sys.argv[1], ("first run",))
    program = cache.compile("f", cache.jit("f", lambda x: jnp.sin(x) * 2 + 1), jnp.arange(8.0))
    print(cache.report()["programs_loaded"], cache.report()["programs_discarded"], program(jnp.arange(8.0))[1])
    """
)


def test_a_program_whose_first_execution_killed_a_process_is_discarded_by_the_next(tmp_path):
    """One process keeps the program; the next loads it and dies (SIGABRT) when it first
    runs it; the third discards it with one warning line instead of dying too, compiles
    it, keeps it again; the fourth loads and runs it, leaving no mark."""
    directory = tmp_path / "xla" / "programs"
    env = {**os.environ, "JAXSPREEZE_PROGRAM_CACHE": "on", "JAX_PLATFORMS": "cpu"}
    run = lambda how: subprocess.run(
        [sys.executable, "-c", FIRST_RUN, str(directory), how],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run("keep").returncode == 0
    (entry,) = directory.glob(f"*{programs.SUFFIX}")
    aborted = run("abort")
    assert aborted.returncode == -6  # SIGABRT while it ran; its mark stays
    (mark,) = programs._marks(entry)
    assert mark.name.startswith(f".{entry.name}.running-")
    third = run("load")
    assert third.returncode == 0, third.stderr[-2000:]
    assert third.stdout.split("\n")[0].startswith("[] ['f']")
    (line,) = [x for x in third.stderr.splitlines() if "jaxspreeze" in x]
    assert "died while running it for the first time" in line and entry.name in line
    assert entry.exists() and programs._marks(entry) == []  # kept again
    assert not programs._discarded(entry).exists()
    fourth = run("load")
    assert fourth.stdout.startswith("['f'] []") and fourth.stderr.strip() == ""
    assert programs._marks(entry) == []


def test_a_loaded_program_runs_first_under_a_mark_then_freely(tmp_path, cache_on, monkeypatch):
    run = ("marked", str(tmp_path))
    directory, entry = _kept(tmp_path, run)
    seen = []
    cache = ProgramCache(directory, run)
    program = cache.compile("f", cache.jit("f", FN), X)
    assert cache.loaded == ["f"] and isinstance(program, programs.FirstRun)
    real = program._program
    monkeypatch.setattr(
        program, "_program", lambda x: (seen.append(programs._marks(entry)), real(x))[1]
    )
    np.testing.assert_allclose(program(X), FN(X))
    np.testing.assert_allclose(program(X), FN(X))
    (first,), second = seen
    assert first.name == f".{entry.name}.running-{os.getpid()}" and second == []
    assert programs._marks(entry) == [] and real.out_info.shape == X.shape
    monkeypatch.undo()
    assert program.out_info.shape == X.shape  # the compiled program's own


def test_a_key_built_on_another_cpu_misses(tmp_path, capsys, cache_on, monkeypatch):
    """The key holds the CPU's model and features: a cache copied to a machine with
    another CPU (or a program built for features this one lacks) is not loaded there."""
    run = ("cpu", str(tmp_path))
    directory, _ = _kept(tmp_path, run)
    here = cachedir.cpu_identity()
    assert here == cachedir.cpu_identity() and here.startswith(os.uname().machine)
    fake = tmp_path / "cpuinfo"
    fake.write_text("processor\t: 0\nmodel name\t: Other CPU\nflags\t\t: fpu sse2 avx512f\n\n")
    monkeypatch.setattr(cachedir.cpu_identity, "__defaults__", (str(fake),))
    assert cachedir.cpu_identity().endswith("| Other CPU | avx512f fpu sse2")
    cache, _, warnings = _again(directory, run, capsys)
    assert cache.loaded == [] and cache.compiled == ["f"] and warnings == []
    assert len(list(directory.glob(f"*{programs.SUFFIX}"))) == 2  # one per CPU, side by side
    monkeypatch.undo()
    monkeypatch.setenv("JAXSPREEZE_PROGRAM_CACHE", "on")
    back, _, _ = _again(directory, run, capsys)
    assert back.loaded == ["f"]


def test_a_program_discarded_by_one_cache_is_kept_again_by_another(
    tmp_path, capsys, cache_on, jax_cache
):
    """The discard is on disk: whoever compiles the program next (another cache of the
    process, another process) compiles it past JAX's cache, which would give a copy XLA
    cannot keep, and keeps it again."""
    run = ("across", str(tmp_path))
    directory, entry = _kept(tmp_path, run)
    entry.write_bytes(entry.read_bytes()[:100])
    assert ProgramCache(directory, run).load("f", X) is None  # discarded, not compiled
    assert not entry.exists() and programs._discarded(entry).exists()
    capsys.readouterr()
    other, _, warnings = _again(directory, run, capsys)
    assert other.compiled == ["f"] and entry.exists() and warnings == []
    assert not programs._discarded(entry).exists()
    third, _, _ = _again(directory, run, capsys)
    assert third.loaded == ["f"]


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_a_directory_others_can_write_is_not_loaded_from(tmp_path, capsys, cache_on):
    run = ("shared", str(tmp_path))
    directory, entry = _kept(tmp_path, run)
    directory.chmod(0o777)
    capsys.readouterr()
    cache, program, warnings = _again(directory, run, capsys)
    assert not cache.on and cache.loaded == [] and cache.compiled == ["f"]
    (line,) = warnings
    assert str(directory) in line and "writable by others" in line and "chmod go-w" in line
    np.testing.assert_allclose(program(X), FN(X))
    assert entry.exists() and len(list(directory.iterdir())) == 1  # neither read nor kept
    directory.chmod(0o700)
    (tmp_path / "xla").chmod(0o757)  # the directory above counts too
    assert "writable by others" in cachedir.distrust(directory)
    (tmp_path / "xla").chmod(0o755)
    assert cachedir.distrust(directory) is None


def _fill(root, sizes_and_ages):
    """Fake entries of both kinds: (kind, size, seconds ago) each; returns their paths."""
    (root / "programs").mkdir(parents=True, exist_ok=True)
    paths = []
    now = time.time()
    for i, (kind, size, ago) in enumerate(sizes_and_ages):
        if kind == "xla":
            path = root / f"jit_f{i}-{i:040x}-cache"
            path.write_bytes(b"x" * size)
            stamp = int((now - ago) * 1e9).to_bytes(8, "little")
            (root / f"jit_f{i}-{i:040x}-atime").write_bytes(stamp)  # JAX's use time
        else:
            path = root / "programs" / f"f{i}-{i:040x}.jaxexe"
            payload = b"p" * size
            path.write_bytes(cachedir.header(payload, f"f{i}", "sac gymnax/Pendulum-v1") + payload)
            os.utime(path, (now - ago, now - ago))
        paths.append(path)
    return paths


def test_the_size_cap_evicts_the_least_recently_used_of_either_kind(tmp_path, capsys):
    root = tmp_path / "cache"
    old_xla, new_prog, old_prog, new_xla = _fill(
        root, [("xla", 1000, 400), ("program", 1000, 10), ("program", 1000, 300), ("xla", 1000, 5)]
    )
    assert cli_main(["cache", "--dir", str(root)]) == 0
    listing = capsys.readouterr().out
    assert "4 entries" in listing and "f1: sac gymnax/Pendulum-v1" in listing
    code = cli_main(["cache", "--dir", str(root), "--max-size", "2.5KB"])
    out = capsys.readouterr().out
    assert code == 0 and "evicted 2 least recently used" in out
    assert not old_xla.exists() and not old_prog.exists()
    assert new_prog.exists() and new_xla.exists()
    assert not old_xla.with_name(old_xla.name.replace("-cache", "-atime")).exists()
    assert cli_main(["cache", "clear", "--dir", str(root)]) == 0
    assert cachedir.entries(root) == []


def test_a_kept_program_holds_the_cache_under_its_cap(tmp_path, cache_on, monkeypatch):
    root = tmp_path / "xla"
    (old,) = _fill(root, [("xla", 50_000, 1000)])
    monkeypatch.setenv(cachedir.ENV_MAX_SIZE, "20KB")
    _, entry = _kept(tmp_path, ("cap", str(tmp_path)))
    assert entry.exists() and not old.exists()  # the new program is never the one evicted


def test_bad_sizes_and_directories_are_refused_in_one_line(tmp_path, capsys):
    assert cli_main(["cache", "--max-size", "lots"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    (tmp_path / "file").write_text("")
    assert cli_main(["cache", "--dir", str(tmp_path / "file")]) == 2
    assert "--dir" in capsys.readouterr().err
    assert cachedir.parse_size("4GB") == 4 * 2**30 and cachedir.parse_size("512") == 512
    with pytest.raises(ValueError, match="not a size"):
        cachedir.parse_size("4 parsecs")


def test_a_read_only_compile_cache_is_one_warning_line(tmp_path, capsys, monkeypatch):
    from jaxspreeze.run.caches import enable_compile_cache

    read_only = tmp_path / "ro"
    read_only.mkdir()
    read_only.chmod(0o555)
    real_access = os.access  # (root may write anywhere: the check is what os.access says)
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if str(p) == str(read_only) else real_access(p, mode)
    )
    assert enable_compile_cache(str(read_only / "xla")) is None
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "compile cache not used" in line and "not writable" in line and "--compile-cache" in line


def test_unwritable_names_why(tmp_path):
    (tmp_path / "file").write_text("")
    assert "not a directory" in cachedir.unwritable(tmp_path / "file" / "xla")
    assert cachedir.unwritable(tmp_path / "new" / "xla") is None


def test_entries_left_without_use_times_do_not_break_the_capped_cache(tmp_path, monkeypatch):
    """JAX's capped cache reads every entry's use time before each write; an entry left by
    a run without the cap (no ``-atime`` file) made every later write fail with a warning.
    Turning the cache on gives such entries a use time (their file's)."""
    from jax._src.lru_cache import LRUCache

    from jaxspreeze.run.caches import enable_compile_cache

    root = tmp_path / "xla"
    root.mkdir()
    old = root / "jit_old-0123-cache"
    old.write_bytes(b"compiled without the cap")
    with pytest.raises(FileNotFoundError):  # what JAX does with it, before the fix
        LRUCache(str(root), max_size=10**6).put("jit_new-1", b"new")
    monkeypatch.setenv(cachedir.ENV_MAX_SIZE, "1MB")
    keep = {
        name: getattr(jax.config, name)
        for name in (
            "jax_compilation_cache_dir",
            "jax_persistent_cache_min_compile_time_secs",
            "jax_persistent_cache_min_entry_size_bytes",
            "jax_compilation_cache_max_size",
        )
    }
    try:
        assert enable_compile_cache(str(root)) == str(root)
    finally:
        for name, value in keep.items():
            jax.config.update(name, value)
    atime = root / "jit_old-0123-atime"
    assert int.from_bytes(atime.read_bytes(), "little") == old.stat().st_mtime_ns
    LRUCache(str(root), max_size=10**6).put("jit_new-2", b"new")  # no error now
    assert (root / "jit_new-2-cache").read_bytes() == b"new"
    assert cachedir.time_untimed(root) == 0  # every entry has its use time
