"""Swappers (classic, neural) and paste-back."""
