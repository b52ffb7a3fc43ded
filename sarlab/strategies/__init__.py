"""Training strategies beside the exact core: distributed neighbour sampling and mini-batches, bounded-staleness
halos, message-flow-graph pruning, label augmentation and Correct & Smooth. Each keeps the core's metric records.
May import :mod:`sarlab.core`, :mod:`sarlab.data`, :mod:`sarlab.nn` and :mod:`sarlab.kernels`; never the
executor or the simulator.
"""
