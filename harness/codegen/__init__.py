"""Code generation: the generated pytest suite (gen-tests) and the new-op scaffold, with their templates."""
