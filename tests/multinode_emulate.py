"""Run by tests/test_cluster.py in a process of its own: a fake 3-node Ray cluster
(`ray.cluster_utils.Cluster`, every node on 127.0.0.1) and one emulated 2 x 2 cell;
prints the Ray node of each worker, by rank, as JSON."""

from __future__ import annotations

import json
import os

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from gcbench.cluster.emulate import emulate_cell  # noqa: E402
from gcbench.config import Cell  # noqa: E402

cluster = Cluster(
    initialize_head=True,
    head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False},
)
for _ in range(2):
    cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1", resources={"summation": 1})
cluster.wait_for_nodes()
ray.init(address=cluster.address, log_to_driver=False)
cell = Cell.model_validate(
    {
        "model": "tiny-mlp",
        "compressor": "none",
        "network": {"inter_gbps": 10},
        "cluster": {"machines": 2, "gpus_per_machine": 2},
        "strategy": "fp32-2level",
    }
)
e = emulate_cell(cell, steps=1)
print(json.dumps({"nodes": e.nodes, "error": e.error_first}))
ray.shutdown()
cluster.shutdown()
