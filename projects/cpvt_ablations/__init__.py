"""The study package: cpvt_ablations (see README.md beside this file)."""
