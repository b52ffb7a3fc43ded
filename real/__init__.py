"""The executor (:mod:`sarlab.real`): launching workers (or joining torchrun), the ``sarlab`` CLI, benchmarks,
``reproduce``, ``profile`` and the calibration steps that run real processes.

The Python API (:func:`sarlab.run`, :func:`sarlab.gradients`) is :mod:`sarlab.real.api`. Sub-packages:
:mod:`~sarlab.real.launch`, :mod:`~sarlab.real.commands`, :mod:`~sarlab.real.bench`,
:mod:`~sarlab.real.calibration`, :mod:`~sarlab.real.reproduce`, :mod:`~sarlab.real.profile`.
May import everything else of sarlab; nothing imports it but the front door (lazily).
"""
