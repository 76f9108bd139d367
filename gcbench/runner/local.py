"""Connecting to Ray: a given cluster address, or a local instance bound to loopback."""

from __future__ import annotations

import logging
import os
from typing import Any

from gcbench.errors import ConfigError

LOOPBACK = "127.0.0.1"


def connect(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect to Ray; returns True if this call started (and so must stop) an instance.

    An address (or RAY_ADDRESS) joins that cluster. Otherwise a local instance starts,
    listening on 127.0.0.1 only, with no dashboard: Ray binds the machine's network
    address unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is in the environment of the start,
    and an exposed, unauthenticated Ray port runs whatever anyone sends it.
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # never phone home
    address = address or os.environ.get("RAY_ADDRESS") or None
    if not address:
        # Ray reads this when it is first imported, so set it before `import ray`; the
        # explicit node address below covers a process that imported ray already.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    if ray.is_initialized():
        return False
    if address:
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(
                f"cannot connect to the Ray cluster at {address!r}: {first}"
            ) from None
        return False
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        dashboard_host=LOOPBACK,
        _node_ip_address=LOOPBACK,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )
    return True


def cluster_info() -> dict[str, Any]:
    import ray

    return {
        "resources": {
            k: float(v) for k, v in ray.cluster_resources().items() if not k.startswith("node:")
        },
        "nodes": [n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")],
    }
