"""Where state lives: memory, Redis and SQL, one interface per family (cache, windows).

Imports only the core.
"""
