# The queue model is deliberately not registered: adding or deleting its rows through the
# ORM would bypass the queue's meta table. Use OrderConfirmation.queue (stats, failed,
# retry, purge) instead.
from typing import TYPE_CHECKING

from django.contrib import admin

from shop.models import Order

# Generic for type checkers only, as in forms.py.
if TYPE_CHECKING:
    _OrderModelAdmin = admin.ModelAdmin[Order]
else:
    _OrderModelAdmin = admin.ModelAdmin


@admin.register(Order)
class OrderAdmin(_OrderModelAdmin):
    list_display = ["id", "email", "total", "created_at"]
    search_fields = ["email"]
    date_hierarchy = "created_at"
    readonly_fields = ["created_at"]
