"""`python -m edge_inference` is the `edge` command."""

from edge_inference.edge.cli import main

main()
