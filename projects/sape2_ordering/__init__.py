"""The study package: sape2_ordering (see README.md beside this file)."""
