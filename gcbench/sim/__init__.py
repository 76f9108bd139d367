"""The simulator: one data-parallel iteration as jobs on streams (`iteration`), its
event engine (`engine`), the compression options it executes (`options`), the
planner's fast timing kernel (`kernel`) and the spans it records (`trace`). It sees
plain numbers (a profile, `Costs`, a plan), never a suite's cell: the simulate backend
(`gcbench.backends.simulate`) makes those from a cell. Nothing is imported here."""
