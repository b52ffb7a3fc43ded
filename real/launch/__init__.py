"""Launching: N local worker processes (or joining torchrun), the worker itself, process lifecycle and
signals, the job shipped to every rank, users' own models and the emulated cluster network (namespaces,
veth, shaping). May import the engine and the kernels.
"""
