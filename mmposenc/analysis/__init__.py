"""Analysis helpers (measures and plots) of mmposenc models."""
from .pervit import (NORMALIZE_MODES, REGIONS, attention_measures,  # noqa: F401
                     classify_heads, collect_phi_p, impact, nonlocality, plot_impact,
                     plot_nonlocality, plot_phi_p, plot_regions, region_counts, region_masks,
                     region_radii, region_scores, token_distances)
