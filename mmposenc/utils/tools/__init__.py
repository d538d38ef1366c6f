"""What the command-line tools of ``tools/`` (and the studies of ``projects/``) share, as
modules they import by name instead of reaching each other's files.

- :mod:`~mmposenc.utils.tools.runner`: load a config, build its Runner, stretch a schedule,
  drop ``Pretrained`` init_cfgs;
- :mod:`~mmposenc.utils.tools.coco128`: a shipped config pointed at a COCO-layout tree, its
  Runner, trained-like norms;
- :mod:`~mmposenc.utils.tools.machine`: one line describing the machine of a benchmark;
- :mod:`~mmposenc.utils.tools.shapes_coco`: the demo's synthetic ``shapes_coco`` data set.

Nothing is imported here; each module is imported on its own, and imports mmengine and torch
only inside the functions that need them.
"""
