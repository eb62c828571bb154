"""Admin users for the admin pages' tests: a superuser and a staff user with some permissions,
each logged in on Django's test client."""

from __future__ import annotations

from django.contrib.auth.models import Permission, User
from django.test import Client


def login_superuser(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("boss", "boss@example.com", "pw"))
    return client


def staff_with(client: Client, *codenames: str) -> Client:
    user = User.objects.create_user("clerk", "clerk@example.com", "pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return client
