"""Policy at run time: quotas and budgets, the fair order of the queue, the idle-GPU
watch, alerts and their sending, and each user's share standing. May import ``jobs``
and below, and ``ports`` (the store's reads it needs); never the loop."""
