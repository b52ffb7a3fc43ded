"""The training floor: composes the engine into runs. The full-batch :class:`~sarlab.training.trainer.Trainer`
(which calls the hooks of the strategies a run switches on: MFG pruning, stale halos, label augmentation, Correct &
Smooth, from :mod:`sarlab.strategies.registry`), the mini-batch trainer (:mod:`~sarlab.training.minibatch`), the
single-process reference (:mod:`~sarlab.training.reference`) and the checkpoint format with
:func:`~sarlab.training.checkpoint.load_model`.

May import :mod:`sarlab.strategies`, :mod:`sarlab.nn`, :mod:`sarlab.core`, :mod:`sarlab.data`,
:mod:`sarlab.common` and :mod:`sarlab.kernels`; never the executor or the simulator.
It may also import :mod:`sarlab.version` (every record names the sarlab that made it).
"""

MAY_IMPORT = ("sarlab.strategies", "sarlab.nn", "sarlab.core", "sarlab.data", "sarlab.common", "sarlab.kernels",
              "sarlab.version")
