"""``python -m contextstore`` runs the command line."""

from contextstore.interfaces.cli import main

main()
