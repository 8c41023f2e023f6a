"""Evals of the skill: tasks in evals/evals.json, graders (checks, drive), the with/without runner (run)."""
