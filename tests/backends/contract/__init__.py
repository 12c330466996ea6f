"""Contract tests: written once against the backend harnesses, run on every backend."""
