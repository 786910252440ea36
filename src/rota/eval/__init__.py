"""Evaluation suites: versioned configs (config.py) turned into ordinary Rota jobs."""
