"""The console's pages, one module per area: sign-in, overview, lessons."""
