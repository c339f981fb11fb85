"""The command line: the only layer that prints, picks exit codes and imports rich."""
