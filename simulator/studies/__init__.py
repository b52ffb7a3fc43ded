"""Studies over the model: validation against measured records, sweeps, sensitivity, the simulated figures
and their drawing, the METIS pair-size study and the paper's qualitative checks. May import every layer of
the simulator and the engine's records; never the executor.
"""
