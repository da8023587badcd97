"""Part of the xprof stand-in (python/device_stubs/xprof/__init__.py)."""
