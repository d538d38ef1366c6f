"""The study package: pervit_phi_p (see README.md beside this file)."""
