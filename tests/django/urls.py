from django.contrib import admin
from django.urls import path

from dbqueue_django.views import metrics

urlpatterns = [path("admin/", admin.site.urls), path("metrics/", metrics)]
