from typing import TYPE_CHECKING

from django import forms

from shop.models import Order

# django-stubs makes ModelForm generic for type checkers only (at run time it would need
# django_stubs_ext, which the shop does not depend on).
if TYPE_CHECKING:
    _OrderModelForm = forms.ModelForm[Order]
else:
    _OrderModelForm = forms.ModelForm


class OrderForm(_OrderModelForm):
    """What POST /orders/ accepts: the model's validation (a valid e-mail, a total >= 0)."""

    class Meta:
        model = Order
        fields = ["email", "total"]
