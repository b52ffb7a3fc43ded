"""System: pricing tables, the per-worker clock, the schedule of one epoch as SimPy processes, the lockstep
executor, jitter and progress spread, the memory timeline and replaying a measured record. May import
:mod:`sarlab.simulator.workload`, :mod:`~sarlab.simulator.network` and :mod:`~sarlab.simulator.hardware`.
"""
