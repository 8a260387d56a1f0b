"""The Kedro pipelines, one folder each (`nodes.py` a few lines over one library entry point, `pipeline.py` the
wiring), found by `pipeline_registry.py`."""
