from django.apps import AppConfig


class BenchAppConfig(AppConfig):
    name = "bench.djangoapp"
    label = "benchapp"
