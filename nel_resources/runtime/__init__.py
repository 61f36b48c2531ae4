"""The processes nel starts and the settings they run with: child processes, the C allocator, the user's persistent settings, Harbor's CLI venv."""
