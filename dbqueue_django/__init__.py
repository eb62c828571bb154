"""dbqueue for Django: declare a queue as a model, push in your view's transaction.

Add ``"dbqueue_django"`` to ``INSTALLED_APPS``, subclass
:class:`dbqueue_django.models.QueueModel` (or :class:`~dbqueue_django.models.RingQueueModel`
for a ring queue), run ``makemigrations`` and ``migrate``, then use
``YourModel.queue``; register handlers with :func:`handler` and run ``manage.py
runqueueworker``.
"""

from dbqueue_django.handlers import handler

__all__ = ["handler"]
