"""A test-only app whose ``flush`` command replaces Django's in the test suite (see
:mod:`tests.django.flushing.management.commands.flush`)."""
