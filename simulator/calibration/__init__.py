"""Calibration: microbenchmarks that run this machine's real ops and processes (engine ops, GAT attention,
allocator and first-use memory, gloo message costs, co-located slowdown) and the fitting of their timings into
a :class:`~sarlab.simulator.hardware.profile.Profile`. May import the engine and the kernels, never the
executor; benchmarks that need the launcher or network emulation live in :mod:`sarlab.real.calibration`.
"""
