"""The study package: resolution_generalization (see README.md beside this file)."""
