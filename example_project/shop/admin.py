# OrderConfirmation needs no registration here: dbqueue_django puts every queue model in the
# admin (counts per state, failed items with their tracebacks, retry / delete / set priority).
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
