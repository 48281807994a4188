"""Collectors: write traces straight into the warehouse while a system runs."""
