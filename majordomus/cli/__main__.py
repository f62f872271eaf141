"""`python -m majordomus.cli`: the same as the `majordomus` command."""

from majordomus.cli.app import main

main()
