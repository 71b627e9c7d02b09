"""Processes: join a multi-process run (``jax.distributed``), name its topology, agree.

A multi-process run is one JAX program run by N processes (one per host, or one per
GPU); :func:`initialize` joins them before anything touches a device. Its arguments are
``jax.distributed.initialize``'s; left out, they come from the environment that
``jaxspreeze launch`` sets (:data:`ENV_COORDINATOR`, :data:`ENV_NUM_PROCESSES`,
:data:`ENV_PROCESS_ID`, optionally :data:`ENV_LOCAL_DEVICE_IDS`), else from a cluster
JAX detects by itself (SLURM, Open MPI), else the run is one process. On CPU the
processes all-reduce with JAX's CPU collectives (gloo, the default of jax 0.10).

After :func:`initialize`, ``jax.devices()`` lists every device of every process; the
data-parallel placement (:func:`jaxspreeze.setup.devices.resolve`) meshes them all. Process 0
is the main process (:func:`is_main`): it alone writes the run's console, sinks,
evaluations and summary. :func:`check_same_config` refuses processes started with
different configs; :func:`local_copy` gives a process its own copy of replicated arrays
(for its evaluator, a policy file); :func:`abort` ends a process at once when a peer has
died (without waiting for the shutdown barrier).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import sys
import threading
from typing import Any

import jax
import numpy as np
from jax._src import distributed as _jax_distributed  # private: the runtime client
from jax.experimental import multihost_utils

from jaxspreeze.core.errors import ConfigError
from jaxspreeze.core.types import Placement, PyTree

ENV_COORDINATOR = "JAXSPREEZE_COORDINATOR"  # HOST:PORT of process 0's coordinator
ENV_NUM_PROCESSES = "JAXSPREEZE_NUM_PROCESSES"
ENV_PROCESS_ID = "JAXSPREEZE_PROCESS_ID"
ENV_LOCAL_DEVICE_IDS = "JAXSPREEZE_LOCAL_DEVICE_IDS"  # e.g. "0" or "2,3": this process's GPUs
HEARTBEAT_TIMEOUT_S = 20  # a process silent this long is declared dead (jax default: 100)
INIT_TIMEOUT_S = 300  # how long processes wait for each other at the start
FAULT = 1  # the exit code of a process that stops because a peer died


def _cluster_detected() -> bool:
    """True under a cluster manager JAX auto-detects with more than one task."""
    for var in ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 1:
            return True
    return False


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(name, f"must be an integer, got {value!r}") from None


def initialize(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids: list[int] | None = None,
    heartbeat_timeout_s: int = HEARTBEAT_TIMEOUT_S,
    init_timeout_s: int = INIT_TIMEOUT_S,
) -> bool:
    """Join a multi-process run; True when this process is one of several.

    Call before anything touches a device. Without arguments: the ``JAXSPREEZE_*``
    environment (``jaxspreeze launch``), else a cluster JAX detects (SLURM, Open MPI),
    else a single process (False, nothing initialised). Calling it again is a no-op.
    """
    if jax.distributed.is_initialized():
        return jax.process_count() > 1
    coordinator = coordinator or os.environ.get(ENV_COORDINATOR) or None
    if num_processes is None:
        num_processes = _env_int(ENV_NUM_PROCESSES)
    if process_id is None:
        process_id = _env_int(ENV_PROCESS_ID)
    if local_device_ids is None and os.environ.get(ENV_LOCAL_DEVICE_IDS, "").strip():
        ids = os.environ[ENV_LOCAL_DEVICE_IDS].split(",")
        local_device_ids = [int(i) for i in ids if i.strip()]
    explicit = coordinator is not None or num_processes is not None or process_id is not None
    if not explicit and not _cluster_detected():
        return False
    if explicit and num_processes == 1 and coordinator is None:
        return False
    if explicit:
        missing = [
            name
            for name, value in (
                ("coordinator", coordinator),
                ("num_processes", num_processes),
                ("process_id", process_id),
            )
            if value is None
        ]
        if missing:
            raise ConfigError(
                missing[0],
                "a multi-process run needs --coordinator HOST:PORT, --num-processes N and "
                f"--process-id I (missing: {', '.join(missing)})",
            )
        if not 0 <= process_id < num_processes:  # type: ignore[operator]
            raise ConfigError("process_id", f"must be in [0, {num_processes}), got {process_id}")
    # jax's first three parameters: coordinator_address, num_processes, process_id
    jax.distributed.initialize(
        coordinator,
        num_processes,
        process_id,
        local_device_ids=local_device_ids,
        heartbeat_timeout_seconds=heartbeat_timeout_s,
        initialization_timeout=init_timeout_s,
    )
    _announce()
    return jax.process_count() > 1


# --------------------------------------------------------------------- who died
# The coordination service's key-value store (a private JAX API, used defensively) holds
# each process's host and pid, so that a process whose collective failed can name the
# peer that died: at once on the same host, else when the service declares it dead.
_KEY = "jaxspreeze/process/{}"


def _client() -> Any:
    """The JAX distributed runtime client (None when unavailable)."""
    return getattr(getattr(_jax_distributed, "global_state", None), "client", None)


def _announce() -> None:
    """Publish this process's host and pid for :func:`dead_processes`."""
    client = _client()
    if client is None:
        return
    value = json.dumps({"host": socket.gethostname(), "pid": os.getpid()})
    try:
        client.key_value_set(_KEY.format(jax.process_index()), value)
    except Exception:
        pass


def _alive(pid: int) -> bool:
    """True when ``pid`` runs on this host (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def dead_processes(wait_s: float = 0.0) -> list[int] | None:
    """The processes of this run known to have died (None: cannot tell).

    Peers on this host are checked at once by pid; for the others the coordination
    service is asked for the live processes, waiting at most ``wait_s`` seconds (it
    declares a process dead after the heartbeat timeout).
    """
    client = _client()
    n, me = jax.process_count(), jax.process_index()
    if client is None or n == 1:
        return None
    host = socket.gethostname()
    dead, remote = [], []
    for i in range(n):
        if i == me:
            continue
        try:
            info = json.loads(client.key_value_try_get(_KEY.format(i)))
        except Exception:
            info = None
        if info is not None and info.get("host") == host:
            if not _alive(int(info["pid"])):
                dead.append(i)
        else:
            remote.append(i)
    if dead or not remote or wait_s <= 0:
        return dead
    found: list[list[int]] = []

    def ask() -> None:
        try:
            live = client.get_live_nodes(list(range(n)))
            found.append([i for i in remote if i not in live])
        except Exception:
            pass

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(wait_s)
    return found[0] if found else None


def peer_failure_message(error: BaseException, wait_s: float = 0.0) -> str:
    """What to say when a collective failed: the dead process(es) if known, and the error."""
    dead = dead_processes(wait_s)
    detail = f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
    if dead:
        names = ", ".join(f"process {i}" for i in dead)
        return f"{names} of {jax.process_count()} died; stopping ({detail})"
    return f"a collective with the other processes failed; stopping ({detail})"


def process_index() -> int:
    """This process's index (0 in a single-process run)."""
    return jax.process_index()


def process_count() -> int:
    """Processes in the run (1 without :func:`initialize`)."""
    return jax.process_count()


def is_main() -> bool:
    """True on process 0, which owns the console, sinks, evaluation and summary."""
    return jax.process_index() == 0


def topology() -> dict[str, Any]:
    """The run's processes and devices, for the summary and the throughput record."""
    devices = jax.devices()
    per_process = [0] * jax.process_count()
    for d in devices:
        per_process[d.process_index] += 1
    return {
        "processes": jax.process_count(),
        "process_index": jax.process_index(),
        "devices": len(devices),
        "devices_per_process": per_process,
        "platform": devices[0].platform,
        "device_kind": devices[0].device_kind,
    }


def describe() -> str:
    """One line: processes x devices and the platform."""
    t = topology()
    per = t["devices_per_process"]
    each = f"{per[0]}" if len(set(per)) == 1 else "/".join(map(str, per))
    return f"{t['processes']} process(es) x {each} {t['platform']} device(s) = {t['devices']}"


def layout(placement: Placement) -> dict[str, Any]:
    """What a checkpoint records of the run that wrote it, and a resume must match.

    The state's shapes are the global sizes whatever the layout, but its replay rows and
    envs are split into one shard per data-parallel device (each with its own keys), so a
    checkpoint resumes onto the same processes and data-parallel devices only (the
    :data:`MATCHED` keys). ``placement_kind`` (``single``, ``split``, ``data``,
    ``split-data``) is recorded for the messages, not matched: whether a state fits the
    placement is the shapes' question (e.g. the split's observation-only buffer).
    """
    return {
        "processes": jax.process_count(),
        "data_parallel": placement.data_parallel,
        "data_devices": placement.data_devices,
        "placement_kind": placement.kind,
    }


MATCHED = ("processes", "data_parallel", "data_devices")  # what a resume must keep
OLD_LAYOUT = {"processes": 1, "data_parallel": False, "data_devices": 1}  # older checkpoints


def describe_layout(saved: dict[str, Any]) -> str:
    """``2 processes, data-parallel over 2 devices`` for a :func:`layout` record."""
    n = saved.get("processes", 1)
    where = f"{n} process{'es' if n != 1 else ''}"
    if saved.get("placement_kind") == "split-data":
        k = saved.get("data_devices", 1)
        return f"{where}, split-data over {2 * k} devices (data-parallel over {k} devices a side)"
    if saved.get("data_parallel"):
        return f"{where}, data-parallel over {saved.get('data_devices', 1)} devices"
    return f"{where}, not data-parallel"


def _digest(value: Any) -> str:
    """A stable hash of a config (a dataclass, a dict or anything JSON can write)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def check_same_config(cfg: Any, what: str = "config") -> None:
    """ConfigError unless every process holds the same ``cfg`` (a no-op in one process).

    Compares a hash of ``cfg`` across processes (a small all-gather): a run whose
    processes were started with different flags is refused before it allocates anything.
    """
    if jax.process_count() == 1:
        return
    digest = _digest(cfg)
    words = np.frombuffer(bytes.fromhex(digest)[:16], dtype=np.uint32)
    gathered = np.asarray(multihost_utils.process_allgather(words))
    differ = [i for i in range(gathered.shape[0]) if not np.array_equal(gathered[i], gathered[0])]
    if differ:
        raise ConfigError(
            what,
            f"process {differ[0]} was started with a different {what} than process 0 "
            f"(processes {differ} differ); start every process with the same flags",
        )


def broadcast_text(text: str, max_bytes: int = 4096) -> str:
    """Process 0's ``text`` on every process (e.g. the run directory it named)."""
    if jax.process_count() == 1:
        return text
    raw = text.encode()
    if len(raw) > max_bytes:
        raise ValueError(f"text of {len(raw)} bytes is longer than max_bytes={max_bytes}")
    buf = np.zeros(max_bytes + 4, np.uint8)
    buf[:4] = np.frombuffer(np.uint32(len(raw)).tobytes(), np.uint8)
    buf[4 : 4 + len(raw)] = np.frombuffer(raw, np.uint8)
    out = np.asarray(multihost_utils.broadcast_one_to_all(buf))
    n = int(np.frombuffer(out[:4].tobytes(), np.uint32)[0])
    return out[4 : 4 + n].tobytes().decode()


def sync(name: str) -> None:
    """Wait until every process reaches the barrier ``name`` (a no-op in one process)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def local_copy(tree: PyTree) -> PyTree:
    """This process's copy of replicated arrays, on one device (others returned unchanged).

    An array replicated over devices of several processes cannot be moved to one device
    as it is; its first local shard holds the whole value. Replicated over several devices
    of this process, the first shard is taken too: a copy to one device made from such an
    array (``jax.device_put(x, device, may_alias=False)``) may still alias its buffer on
    that device, which a donating chunk then deletes under the evaluator.
    """

    def local(x: Any) -> Any:
        if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
            if not x.is_fully_replicated:
                if x.is_fully_addressable:
                    return x
                raise ValueError("local_copy takes replicated arrays; this one is sharded")
            return x.addressable_shards[0].data
        return x

    return jax.tree.map(local, tree)


def host_copy(tree: PyTree) -> PyTree:
    """The whole value of every leaf as numpy, on every process (a collective: all call it).

    Replicated leaves come from this process's copy; sharded ones (envs, replay rows) are
    gathered from every process. PRNG key arrays come back as their raw key data.
    """

    def host(x: Any) -> Any:
        if not isinstance(x, jax.Array):
            return x
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        if x.is_fully_addressable or x.is_fully_replicated:
            return np.asarray(local_copy(x) if not x.is_fully_addressable else x)
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(host, tree)


def gather(tree: PyTree) -> PyTree:
    """``tree`` with every leaf whole and addressable here (a collective: all call it).

    What a process needs to write a checkpoint of a state that spans processes: a
    replicated leaf becomes this process's copy (a one-device array, PRNG keys kept), a
    sharded one (envs, replay rows) the whole value gathered from every process (numpy,
    or a PRNG key array). Leaves this process holds whole are returned unchanged.
    """

    def whole(x: Any) -> Any:
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return x
        if x.is_fully_replicated:
            return x.addressable_shards[0].data
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            impl = jax.random.key_impl(x)
            data = np.asarray(multihost_utils.process_allgather(jax.random.key_data(x)))
            return jax.random.wrap_key_data(data, impl=impl)
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(whole, tree)


def failed_processes(ok: bool) -> list[int]:
    """The processes for which ``ok`` is False (a collective: all call it).

    How the processes agree that a step every one of them took on its own (setting up,
    writing a checkpoint) succeeded everywhere before they go on together.
    """
    if jax.process_count() == 1:
        return [] if ok else [0]
    flags = multihost_utils.process_allgather(np.array([int(bool(ok))], np.int32))
    return [i for i, f in enumerate(np.asarray(flags).reshape(-1).tolist()) if not f]


# --------------------------------------------------------------------- stopping together
# A stop (Ctrl-C, SIGTERM) may reach one process only. It proposes a chunk a little
# ahead in the coordination service's key-value store (the first proposal wins); every
# process reads the store at its chunk boundaries (no device sync) and stops at that
# chunk. Two chunks ahead is enough: a process waits for chunk c-1 to finish once chunk c
# is queued, and chunk c+1 cannot finish on any process before every process has
# queued it, i.e. passed the boundary where the proposal was made.
_STOP_KEY = "jaxspreeze/stop"
STOP_LAG = 2  # chunks between the boundary that sees a stop and the one all stop at


def propose_stop(chunk: int, reason: str) -> None:
    """Ask every process to stop at chunk ``chunk + STOP_LAG`` (a no-op if one already asked)."""
    client = _client()
    if client is None:
        return
    try:
        client.key_value_set(_STOP_KEY, f"{chunk + STOP_LAG} {reason}")
    except Exception:  # already set (by another process, or before): the first one holds
        pass


def agreed_stop() -> tuple[int, str] | None:
    """(the chunk to stop at, why) once a process proposed a stop, else None."""
    client = _client()
    if client is None:
        return None
    try:
        value = client.key_value_try_get(_STOP_KEY)
    except Exception:  # not set
        return None
    chunk, _, reason = value.partition(" ")
    return int(chunk), reason


def abort(message: str, code: int = FAULT) -> None:
    """Print ``message`` and end this process at once (no shutdown barrier to wait for).

    For a multi-process run whose peer has died: the collectives fail, and waiting for
    the coordination service's shutdown barrier would only add its timeout.
    """
    print(f"jaxspreeze: error: process {jax.process_index()}: {message}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
