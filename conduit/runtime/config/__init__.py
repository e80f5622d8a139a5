"""The settings groups (one ``BaseSettings`` per concern) that ``conduit.runtime.settings.Settings`` composes."""
