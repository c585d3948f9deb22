"""A hook module whose import fails: naming it must cost one line, not a traceback."""
raise RuntimeError("corpus_hooks_broken is broken on purpose")
