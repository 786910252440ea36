"""Recurring fine-tuning pipelines: rounds of ordinary Rota jobs (issue 23)."""
