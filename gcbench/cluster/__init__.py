"""Emulation on Ray (issue #14, DESIGN §6): actors stand in for the GPU workers and run
the cell's plan with real gradients, compressors and collectives (`emulate_cell`)."""
