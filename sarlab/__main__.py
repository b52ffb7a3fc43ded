"""``python -m sarlab``: the command line (the same as the ``sarlab`` script).

Like the names of ``sarlab/__init__.py``, the executor is reached by name at call time: the front door is the one
place of the engine's package that hands over to the executor, and nothing is imported before it is used.
"""
import importlib
import sys

if __name__ == "__main__":
    sys.exit(importlib.import_module("sarlab.real.commands.cli").main())
