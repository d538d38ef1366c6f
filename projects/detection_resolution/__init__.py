"""The study package: detection_resolution (see README.md beside this file)."""
