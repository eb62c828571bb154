"""The template tags of dbqueue's admin pages."""
