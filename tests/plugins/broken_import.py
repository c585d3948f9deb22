"""A plugin whose module cannot be imported (its native library is missing)."""
raise ImportError("libmykernels.so: cannot open shared object file: No such file or directory")
