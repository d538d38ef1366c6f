"""Analysis helpers (measures and plots) of mmposenc models."""
from .pervit import (collect_phi_p, nonlocality, peripheral_radii,  # noqa: F401
                     peripheral_regions, plot_phi_p, position_impact, classify_heads)
