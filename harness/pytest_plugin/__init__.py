"""The pytest side: the plugin (markers, shared backends, results, the verdict) and the helpers generated tests call."""
