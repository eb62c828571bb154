"""What the models dbqueue generates beside a user's queue model (a split queue's
``…QueueMeta`` and ``…QueueHead``, a ring's ``…Failed``) need to look like models a class
statement wrote."""

from __future__ import annotations

import sys

from django.db import models


def bind_to_module[M: type[models.Model]](model: M) -> M:
    """Bind a generated model to its module's namespace, as a class statement would, so that
    ``app.models.NameQueueMeta`` imports it: Django 6's ``shell`` auto-imports every model
    that way, and warns about each one it cannot. A model made inside a function (its
    qualified name says ``<locals>``) is left alone, like the model it is made for; so is a
    name the module already binds."""
    module = sys.modules.get(model.__module__)
    local = "<locals>" in model.__qualname__
    if module is not None and not local and not hasattr(module, model.__name__):
        setattr(module, model.__name__, model)
    return model
