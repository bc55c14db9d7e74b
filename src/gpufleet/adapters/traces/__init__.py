"""Loaders for public GPU-cluster traces and a generic CSV format."""
