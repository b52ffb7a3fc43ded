"""``sarlab profile``: memray captures per rank, attribution of a peak to the engine's phases, and the report.
"""
