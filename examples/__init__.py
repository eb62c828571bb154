"""Example applications that use dbqueue (each has a README)."""
