"""Analysis helpers (measures and plots) of mmposenc models."""
from .pervit import (REGIONS, attention_measures, classify_heads,  # noqa: F401
                     collect_phi_p, impact, nonlocality, plot_impact, plot_nonlocality,
                     plot_phi_p, plot_regions, region_counts, region_masks, region_radii,
                     region_scores, token_distances)
