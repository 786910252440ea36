"""The local backend: jobs started by the local runner (``runner``), which journals their
starts and ends (``journal``), reached through its client (``client``); ``backend`` is the
daemon's side. Empty on purpose: the runner process imports ``local.runner`` alone."""
