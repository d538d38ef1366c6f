"""Helpers shared by the command-line tools of ``tools/`` and the studies of ``projects/``.

Nothing is imported here; import each module on its own."""
