"""The exact engine: configuration, process-group communication, sharded graphs, the three aggregation modes
(``sar``, ``sa``, ``oneshot``), the full-batch training loop, metric records, memory measurement and
checkpoints. May import :mod:`sarlab.data`, :mod:`sarlab.nn`, :mod:`sarlab.strategies` and :mod:`sarlab.kernels`;
never the executor or the simulator.
"""
