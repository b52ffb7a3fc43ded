"""Strategies priced: mini-batch neighbour sampling, bounded staleness, one prediction interface over all
strategies and the cost planner. May import the workload, system, network and hardware layers.
"""
