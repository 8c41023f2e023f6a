"""Checks behind `scripts/skills.py`: the pack's manifest generator and validator.

Entry points: :func:`skillcheck.validate.validate_pack` (all findings for a pack
root) and :func:`skillcheck.manifest.build_manifest` (the manifest `generate`
writes). Each module does one job; `codes.py` is the registry of finding codes.
"""
