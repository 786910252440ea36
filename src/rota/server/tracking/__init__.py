"""What a job writes and where it is mirrored: its log (streaming, size limit, time
index), its events and outputs read into metrics and progress (``outputs``), the trackers
(MLflow, W&B, TensorBoard: ``trackers``), and the daemon's own Prometheus metrics
(``metrics``). May import ``storage`` (cards) and ``access``; of the job records only
their types."""
