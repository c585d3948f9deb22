"""Forward ops: the functions each gradient op differentiates."""
