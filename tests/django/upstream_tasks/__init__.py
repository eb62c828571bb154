"""Django's own tests of its Tasks framework (``vendor/tasks``, see README.md)."""
