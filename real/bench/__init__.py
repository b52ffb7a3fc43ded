"""Benchmarks that run the engine for real: per-worker memory and epoch time vs workers, side-by-side engine
and kernel speed, fused GAT kernels, network links, the strategies head-to-head.
"""
