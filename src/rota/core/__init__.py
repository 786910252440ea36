"""The pure core: job model, lifecycle and the snapshot -> plan scheduler.

Nothing in this package performs I/O, reads the clock or the environment, or uses
global randomness: time comes in as ``now`` and the daemon and the simulator share it.
"""
