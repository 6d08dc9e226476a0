"""The http transport's native dialect: kernel commands and events over REST + SSE
(``wire.py`` the bodies, ``codec.py`` the translation, ``routes.py`` the handlers)."""
