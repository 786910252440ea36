"""The daemon and its loop: the scheduling pass, launches (intent first, then the
backends), exits gathered into one commit, recovery after a restart, hand-over of
engine pools' jobs, and the set of backends. The top of the daemon: it wires
``schedules``, ``policy``, ``jobs``, ``tracking``, ``storage`` and ``access``; nothing
below imports it."""
