"""Calibration steps that need the executor: the ``sarlab calibrate`` orchestrator and the microbenchmarks
that start ranks through the launcher or on the emulated network (progress spread, ring rounds, shaping
cost). The fitting lives in :mod:`sarlab.simulator.calibration`.
"""
