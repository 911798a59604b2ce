"""A CPU stand-in for pycuda (tests only): see ``driver``."""
