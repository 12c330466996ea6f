"""The ways in: command line, HTTP service, web console, and the fleet runner."""
