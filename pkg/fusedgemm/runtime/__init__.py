"""Runtime: arch detection, code-object build cache, code-object metadata, kernel launchers."""
