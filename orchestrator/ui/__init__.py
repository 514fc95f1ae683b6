"""`yolo-orch ui`: a local, read-only web dashboard over the run registry and the run directories
(server.py: the routes; store.py: what they read; static/: the page script and style)."""
