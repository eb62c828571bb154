"""Executors over bare DB-API connections, for using the core without a framework."""
