"""Network: NIC channels, point-to-point and all-reduce pricing, links whose concurrent flows share
throughput, measured link profiles and the exchange-pattern model of the round benchmark. May import
:mod:`sarlab.simulator.hardware` and the system's clock for the round model.
"""
