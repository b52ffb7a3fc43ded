"""Graph inputs and partitions: the :class:`Graph` every source returns, the sources (specs, npz, OGB, PyG,
networkx, scipy, DGL partitions), the shipped datasets, checks of user data, and METIS/random partitioning
to disk. May import: the standard library, numpy/scipy/torch, :mod:`sarlab.common` and :mod:`sarlab.kernels`;
nothing else of sarlab.
It may also import :mod:`sarlab.version` (every record names the sarlab that made it).
"""

MAY_IMPORT = ("sarlab.common", "sarlab.kernels", "sarlab.version")
