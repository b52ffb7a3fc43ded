"""The executor (:mod:`sarlab.executor`): launching workers (or joining torchrun), the ``sarlab`` CLI, benchmarks,
``reproduce``, ``profile`` and the calibration steps that run real processes.

The Python API (:func:`sarlab.run`, :func:`sarlab.gradients`) is :mod:`sarlab.executor.api`. Sub-packages:
:mod:`~sarlab.executor.launch`, :mod:`~sarlab.executor.commands`, :mod:`~sarlab.executor.bench`,
:mod:`~sarlab.executor.calibration`, :mod:`~sarlab.executor.reproduce`, :mod:`~sarlab.executor.profile`.
May import everything else of sarlab; nothing imports it but the front door (lazily).
"""
