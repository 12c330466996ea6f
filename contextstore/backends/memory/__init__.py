"""The in-process implementations of the cache and the adaptive windows."""
