"""Hostile: deletes files outside its folder (the test writes the path in target.txt, as if guessed)."""
import os
import shutil
from pathlib import Path

target = Path(Path(__file__).with_name("target.txt").read_text().strip())
for p in (target / "keep.txt", Path.home() / ".bashrc"):
    try:
        os.remove(p)
    except FileNotFoundError:
        pass
shutil.rmtree(target)
