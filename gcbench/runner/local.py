"""Connecting to Ray: a given cluster address, or a local instance bound to loopback."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator
from typing import Any

from gcbench.errors import ConfigError, Terminated

LOOPBACK = "127.0.0.1"
# How long reaching a cluster may take: the TCP connection to its address, then each
# of Ray's own connection attempts (Ray's defaults retry for minutes).
CONNECT_TIMEOUT_S = 5.0
RAY_CONNECT_ENV = {
    "RAY_gcs_server_port_wait_time_s": "2",  # attempts at the GCS, about 1 s apart
    "RAY_py_gcs_connect_timeout_s": "3",
    "RAY_gcs_rpc_server_connect_timeout_s": "2",
    "RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S": "3",  # ray:// clients: 3 attempts
    "RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": "3",
}
DEFAULT_PORTS = {"": 6379, "ray": 10001}


def endpoint(address: str) -> tuple[str, int] | None:
    """The (host, port) that a cluster address connects to first, or None where Ray
    finds the cluster itself (`auto`, `local`, other schemes)."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "", address
    if address in ("auto", "local") or scheme not in DEFAULT_PORTS:
        return None
    rest = rest.split("/", 1)[0]
    host, port = rest, str(DEFAULT_PORTS[scheme])
    if rest.startswith("["):  # [IPv6]:port
        host, _, tail = rest[1:].partition("]")
        if tail.startswith(":"):
            port = tail[1:]
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError([f"--address {address!r}: expected host:port or ray://host:port"])
    return host, int(port)


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A ConfigError of one line, within about `timeout_s`, if nothing accepts a TCP
    connection at the cluster address (name unknown, refused, unreachable, timed out)."""
    target = endpoint(address)
    if target is None:
        return
    host, port = target
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except socket.gaierror as e:
        why = f"cannot resolve {host!r} ({e.strerror})"
    except TimeoutError:
        why = f"no answer from {host}:{port} within {timeout_s:g} s"
    except OSError as e:
        why = f"{host}:{port}: {e.strerror or e}"
    else:
        return
    raise ConfigError([f"cannot connect to the Ray cluster at {address!r}: {why}"])


@contextlib.contextmanager
def _bounded_ray_connect() -> Iterator[list[str]]:
    """Ray's connection attempts bounded to seconds (unless the environment sets them),
    with what Ray's C++ core writes to stderr meanwhile held back: the yielded list gets
    its lines; they are passed on if the connection succeeds and dropped (the caller says
    what failed, in one line) if it fails."""
    import tempfile

    saved = {k: os.environ.get(k) for k in RAY_CONNECT_ENV}
    for k, v in RAY_CONNECT_ENV.items():
        os.environ.setdefault(k, v)
    lines: list[str] = []
    held = tempfile.TemporaryFile()
    stderr = os.dup(2)
    ok = False
    try:
        os.dup2(held.fileno(), 2)
        yield lines
        ok = True
    finally:
        os.dup2(stderr, 2)
        os.close(stderr)
        held.seek(0)
        text = held.read()
        held.close()
        if ok:
            os.write(2, text)
        lines += text.decode(errors="replace").splitlines()
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


def _ray_said(lines: list[str]) -> str | None:
    """The reason in Ray's last connection warning, e.g. `RpcError: ... status: 404`."""
    for line in reversed(lines):
        if "Failed to get cluster ID from GCS server:" in line:
            return line.split("Failed to get cluster ID from GCS server:", 1)[1].strip()
        if "] " in line and " W " in line:
            return line.split(": ", 1)[-1].strip()
    return None


def connect(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect to Ray; returns True if this call started (and so must stop) an instance.

    An address (or RAY_ADDRESS) joins that cluster; one that cannot be reached is a
    ConfigError of one line within seconds (`check_reachable`, then Ray's attempts
    bounded by `RAY_CONNECT_ENV`). Otherwise a local instance starts, listening on
    127.0.0.1 only, with no dashboard: Ray binds the machine's network address unless
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is in the environment of the start, and an
    exposed, unauthenticated Ray port runs whatever anyone sends it.
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # never phone home
    address = address or os.environ.get("RAY_ADDRESS") or None
    if not address:
        # Ray reads this when it is first imported, so set it before `import ray`; the
        # explicit node address below covers a process that imported ray already.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        # glibc's malloc arenas per process, for the processes Ray starts (they inherit
        # it): an emulated worker's two threads would each keep an arena of freed
        # gradient-sized blocks (bert-base's 2 x 2 wall-clock cell peaked 2 GB higher).
        # Set here rather than as each actor's runtime_env, which costs ~2 s an actor.
        os.environ.setdefault("MALLOC_ARENA_MAX", "2")
        import ray

        if ray.is_initialized():
            return False
        # address="local": always a new instance, even where another Ray cluster runs on
        # this host (ray.init() alone would join it, or refuse num_cpus for it)
        # Ray's notice that token authentication is on (the default since 2.5x) is one
        # more line on every run: the instance listens on loopback with the token on
        notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
        was = notice.level
        notice.setLevel(logging.ERROR)
        try:
            ray.init(
                address="local",
                num_cpus=num_cpus,
                include_dashboard=False,
                dashboard_host=LOOPBACK,
                _node_ip_address=LOOPBACK,
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
        except Exception as e:  # Ray's start raises many kinds (a timeout under load)
            with contextlib.suppress(Exception):
                ray.shutdown()  # whatever part of it started
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
            raise ConfigError(
                [f"ray: a local instance did not start ({type(e).__name__}"
                 f"{': ' + first if first else ''}); try again, or give --address"]
            ) from None  # fmt: skip
        finally:
            notice.setLevel(was)
        _first_lines_of_ray_errors()
        _sigterm_interrupts()
        return True
    check_reachable(address)  # fail in seconds, not after Ray's minutes of retries
    said: list[str] = []
    try:
        # Ray's C++ core reads its timeouts when ray is first imported: bound them first
        with _bounded_ray_connect() as said:
            import ray

            if not ray.is_initialized():
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
                _sigterm_interrupts()
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        why = _ray_said(said)
        raise ConfigError(
            [
                f"cannot connect to the Ray cluster at {address!r}: {first}"
                + (f" ({why})" if why else "")
            ]
        ) from None
    return False


def _sigterm_interrupts() -> None:
    """SIGTERM raises `Terminated` in the main thread from now on, so that a run stops as
    on Ctrl-C (finished cells kept, its own Ray shut down, a line saying so). Ray's start
    installs handlers that exit at once instead (a local instance's kills its processes
    and exits 1; its C++ core prints a stack trace): this replaces them, so call it after
    `ray.init`."""
    if threading.current_thread() is not threading.main_thread():
        return

    def on_term(signum: int, frame: Any) -> None:
        raise Terminated()

    signal.signal(signal.SIGTERM, on_term)


def _first_lines_of_ray_errors() -> None:
    """Ray's driver prints every error its cluster publishes whole: a raylet that dies
    mid-run is its last 20 log lines of state dumps, twice, over the progress line. Keep
    the first line of each (the run says the rest in its own error: `run.ClusterLost`). Ray's
    printer is module state of `ray._private.worker`; where a Ray release has none, the
    dumps print as Ray prints them."""
    import ray._private.worker as rw

    original = getattr(rw, "print_to_stdstream", None)
    if original is None or getattr(original, "gcbench_first_lines", False):
        return

    def first_lines(data: dict[str, Any], ignore_prefix: bool) -> Any:
        lines = [str(x).strip().splitlines()[0] for x in data.get("lines", []) if str(x).strip()]
        return original({**data, "lines": lines[:1]}, ignore_prefix)

    first_lines.gcbench_first_lines = True  # type: ignore[attr-defined]
    rw.print_to_stdstream = first_lines


def cluster_info() -> dict[str, Any]:
    import ray

    return {
        "resources": {
            k: float(v) for k, v in ray.cluster_resources().items() if not k.startswith("node:")
        },
        "nodes": [n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")],
    }


def describe(info: dict[str, Any], started_here: bool) -> str:
    """One line naming the Ray cluster a run uses: the local instance this process
    started, or the cluster it joined, with its nodes and CPUs (`cluster_info`)."""
    import ray

    cpus = info["resources"].get("CPU", 0)
    nodes = len(info["nodes"])
    size = f"{nodes} node{'s' * (nodes != 1)}, {cpus:g} CPUs"
    if started_here:
        return f"ray: a new local instance on {LOOPBACK} ({size})"
    gcs = ray.get_runtime_context().gcs_address
    return f"ray: the cluster at {gcs} ({size})"
