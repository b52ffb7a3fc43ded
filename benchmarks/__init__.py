"""Developer benchmarks, outside the wheel: A/B drivers against another checkout and measuring campaigns.

Run from the repository root as ``python -m benchmarks.<module>`` (see benchmarks/README.md). This folder imports
``sarlab``; ``sarlab`` never imports it.
"""
