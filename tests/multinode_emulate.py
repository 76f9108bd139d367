"""Run by tests/test_cluster.py in a process of its own: a fake 3-node Ray cluster
(`ray.cluster_utils.Cluster`, every node on 127.0.0.1, two of them with 2 GPUs and the
`summation` resource) and emulated 2 x 2 cells; prints, as JSON, the Ray node of each
worker by rank, with and without GPUs, the node of a PS cell's summation server, and the
refusals of cells that cannot fit."""

from __future__ import annotations

import json
import os
import sys

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from gcbench.cluster.emulate import emulate_cell, refuse_placement  # noqa: E402
from gcbench.config import Cell  # noqa: E402
from gcbench.errors import ConfigError  # noqa: E402

gpus = int(sys.argv[1]) if len(sys.argv) > 1 else 0
cluster = Cluster(
    initialize_head=True,
    head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False},
)
for _ in range(2):
    cluster.add_node(
        num_cpus=1, num_gpus=gpus, node_ip_address="127.0.0.1", resources={"summation": 1}
    )
cluster.wait_for_nodes()
ray.init(address=cluster.address, log_to_driver=False)


def cell(machines: int, per: int, servers: int = 0) -> Cell:
    return Cell.model_validate(
        {
            "model": "tiny-mlp",
            "compressor": "none",
            "network": {"inter_gbps": 10},
            "cluster": {"machines": machines, "gpus_per_machine": per, "cpu_servers": servers},
            "strategy": "ps" if servers else "fp32-2level",
        }
    )


e = emulate_cell(cell(2, 2), steps=1)
ps = emulate_cell(cell(2, 2, servers=1), steps=1)
summation = [n["NodeID"] for n in ray.nodes() if n["Resources"].get("summation")]
refused = []
for machines, per, servers in ((2, 4, 0), (3, 2, 0), (2, 2, 3)):
    try:
        refuse_placement(cell(machines, per, servers), [n for n in ray.nodes() if n["Alive"]])
    except ConfigError as err:
        refused.append(str(err))
# A placement made impossible mid-run: a GPU node leaves; the next cell is infeasible
# (an `infeasible` row in `gcbench run`), said at once, and leaves no placement group.
midrun: dict[str, object] = {}
if gpus:
    import time

    from gcbench.errors import InfeasibleError

    cluster.remove_node(cluster.list_all_nodes()[-1])
    t0 = time.perf_counter()
    try:
        emulate_cell(cell(2, 2), steps=1)
        midrun["raised"] = None
    except InfeasibleError as err:
        midrun["raised"] = str(err)
    midrun["seconds"] = time.perf_counter() - t0
    from ray.util import placement_group_table

    midrun["groups_left"] = [
        g for g in placement_group_table().values() if g.get("state") != "REMOVED"
    ]
print(json.dumps({"nodes": e.nodes, "error": e.error_first, "refused": refused,
                  "midrun": midrun, "server_nodes": ps.server_nodes, "ps_error": ps.error_first,
                  "summation_nodes": summation}, default=str))  # fmt: skip
ray.shutdown()
cluster.shutdown()
