"""The http transport's OpenAI-compatible dialect: ``/v1/chat/completions`` and
``/v1/models`` (``wire.py`` the shapes, ``codec.py`` the translation, ``routes.py``
the handlers)."""
