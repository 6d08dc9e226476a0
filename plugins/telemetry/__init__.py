"""Telemetry observers: Prometheus metrics (always), OpenTelemetry traces (when configured).

Both are :class:`kernel.RunObserver` s, registered like any plugin through
``gateway_register_observers`` (``plugin.py``); the kernel tells them the facts of every run.
"""
