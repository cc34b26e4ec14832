"""Screens of the kvtui app: help, and the command palette provider."""
