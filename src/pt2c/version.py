"""pt2c's version: a leaf module, so every part of pt2c can record it without importing the package."""

__version__ = "0.1.0"
