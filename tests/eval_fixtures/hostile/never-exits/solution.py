"""Hostile: ignores SIGTERM, leaves a child behind and never exits."""
import os
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    while True:
        time.sleep(1)
while True:
    time.sleep(1)
