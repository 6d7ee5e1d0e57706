"""`python -m gtmkit` runs the command line."""

from .cli import main

main()
