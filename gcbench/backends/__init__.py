"""How a cell runs: simulated (`simulate`: the timeline of `gcbench.sim` under the cell's
strategy) or emulated on Ray actors (`gcbench.cluster.emulate`). Nothing is imported
here, so that reading a cell's costs does not load the emulator."""
