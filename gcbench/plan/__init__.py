"""The compression planner (ByteComp, `bytecomp.txt` §4): which option each tensor takes.

`space.py`: the options a planner may choose (the cell's constraints); `greedy.py`:
Algorithm 1 over an option space, scored by the timeline kernel; `offload.py`:
Algorithm 2; `brute.py`: exhaustive search for small models; `strategies.py`: the planner
strategies; `io.py`: plan files. Nothing is imported here, so that validating a planner
cell (which reads `space.py`) does not load the planner.
"""
