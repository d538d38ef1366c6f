"""The study package: resolution_real_images (see README.md beside this file)."""
