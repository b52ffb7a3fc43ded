"""The ``sarlab`` command line: the dispatcher, the options every command shares and one module per
command, each a thin layer over the Python API and the launcher.
"""
