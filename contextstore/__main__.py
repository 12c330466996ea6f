"""``python -m contextstore`` runs the command line."""

from contextstore.cli import main

main()
