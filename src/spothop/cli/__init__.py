"""The command line: one module per command group, registered in :mod:`spothop.cli.main`."""
