"""The http transport's OpenAI Responses dialect: ``POST /v1/responses``,
``GET`` / ``DELETE /v1/responses/{id}`` (``wire.py`` the shapes, ``codec.py`` the
translation, ``stored.py`` the bounded map of stored responses, ``routes.py`` the
handlers)."""
