"""A worker handler whose module takes $SLOW_IMPORT_SECONDS to import: a backend library as slow to load as
onnxruntime with torch on a loaded machine (tests/test_worker_import_limit.py)."""
import os
import time

time.sleep(float(os.environ.get("SLOW_IMPORT_SECONDS", "0")))

from worker_handlers import handle  # noqa: E402,F401 - the handler, once the slow import is done
