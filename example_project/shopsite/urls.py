"""URLs of the example shop: the order API (sync and async), the queue's stats and the admin."""

from django.contrib import admin
from django.urls import path

from shop import views

urlpatterns = [
    path("orders/", views.place_order, name="place-order"),
    path("orders/async/", views.place_order_async, name="place-order-async"),
    path("queue/", views.queue_stats, name="queue-stats"),
    path("admin/", admin.site.urls),
]
