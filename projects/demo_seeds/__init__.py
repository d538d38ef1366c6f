"""The study package: demo_seeds (see README.md beside this file)."""
