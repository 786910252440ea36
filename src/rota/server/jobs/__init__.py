"""What the daemon holds of its jobs between passes: the running ones (``running``,
``run_times``), the pending queue, the job table (every state change, held to its
transaction), batches, stops and signals, GPU release, the reading of a running job's
output and checkpoints (``job_output``), and the commands on jobs (hold, release,
cancel). May import ``tracking``, ``storage`` and ``access``; never the loop."""
