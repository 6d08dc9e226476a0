"""Built-in plugins and the plugin system (pluggy, project name ``gateway``)."""
