"""Clusters behind the kernel's ``Cluster`` protocol, chosen by the URL scheme of ``[cluster] redis_url``."""
