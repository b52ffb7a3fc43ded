"""Hardware profiles: per-op throughputs, network alpha-beta figures and memory constants of a machine
(presets, shipped calibrations in ``simulator/profiles/``), their plausibility checks and which profile a
run uses. Imports nothing else of the simulator.
"""
