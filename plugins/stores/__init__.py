"""Stores behind the kernel's ``Store`` protocol, chosen by the URL scheme of ``[store] path``."""
