from django.apps import AppConfig


class CrashAppConfig(AppConfig):
    name = "tests.reliability.crashapp"
    label = "crashapp"
