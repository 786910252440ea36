"""Work that submits itself when due: evaluation schedules and recurring pipelines, both
run by ``due_check`` over the narrow ``DuePort`` the daemon meets (timers, batches, the
running jobs, cancel) and through ``intake``. May import ``jobs`` and below; never the
loop."""
