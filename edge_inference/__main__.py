"""`python -m edge_inference` is the `edge` command."""

from edge_inference.cli import main

main()
