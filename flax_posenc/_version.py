"""The version of flax-posenc (the numpy floor: the command line reads it without the package's ``__init__``)."""

__version__ = "0.2.0"
