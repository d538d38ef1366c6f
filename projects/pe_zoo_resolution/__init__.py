"""The study package: pe_zoo_resolution (see README.md beside this file)."""
