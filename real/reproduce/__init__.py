"""``sarlab reproduce``: the plan of figure recipes, its units (measured here or simulated), the step cache,
and the measured figures 7 and 8 and the accuracy table.
"""
