"""Hostile: fills the disk from its working folder."""
block = b"x" * (1 << 20)
with open("fill.bin", "wb") as f:
    while True:
        f.write(block)
        f.flush()
