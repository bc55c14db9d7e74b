"""Test doubles shared by the tests and the scripts: the in-memory API and its HTTP emulator."""
