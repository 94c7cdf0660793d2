"""The package as installed: the TRL seams, the wheel, the generated docs."""
