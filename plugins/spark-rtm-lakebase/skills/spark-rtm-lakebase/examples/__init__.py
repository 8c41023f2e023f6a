"""Runnable examples that use the rtm_lakebase package the way a user's job does."""
