"""The daemon, by concern. Each package's docstring says what it owns and what it may
import; ``lint-imports`` (pyproject.toml) keeps the packages free of circles. From the
bottom up:

- ``access``: who is asking (auth, tokens, Unix peers), accounts and their rules, secrets;
- ``storage``: the daemon's side of workspaces, datasets, artifacts, share links, cards;
- ``tracking``: what a job writes (its log, events, metrics) and the trackers it is
  mirrored to, and the daemon's own Prometheus metrics;
- ``jobs``: what the daemon holds of its jobs (the running ones, the queue, the job table,
  batches, stops, GPU release) and the reading of their output;
- ``policy``: quotas, fair order, idle watch, alerts, share standing;
- ``schedules``: what submits by itself: evaluation schedules and pipelines;
- ``loop``: the daemon and its loop: passes, launches, exits, recovery, engine hand-over;
- ``api`` and ``web``: the HTTP API (routers over ``ports``) and the dashboard.

The modules left at this level wire the rest: ``intake`` (every submit's one way in),
``ports`` (what the API is given), ``daemon_ports`` and ``daemon_reads`` (the daemon
behind them), ``serve`` (a daemon process: its home lock, socket, API workers).
"""
