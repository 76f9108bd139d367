"""The compression planner (ByteComp, `bytecomp.txt` §4): which option each tensor takes.

`greedy.py`: Algorithm 1 over a given option space, scored by the simulator.
"""

from gcbench.plan.greedy import DEFAULT_SPACE, Greedy, fused_plan, greedy

__all__ = ["DEFAULT_SPACE", "Greedy", "fused_plan", "greedy"]
