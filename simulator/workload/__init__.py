"""Workload: what each worker computes, sends and holds - partition statistics (from a manifest or an
estimate), the model spec, the ops of every layer and their tensor sizes. May import only other parts of the
simulator's model (never the engine's runtime, never the executor).
"""
