"""The programs that print the figures of docs/benchmarks.md, by subject: ``training/``, ``prediction/``,
``memory/``, ``preprocessing/`` (preprocess, segment, scoring, the OntoNotes conversion), ``serving/`` and ``gpu/``;
``common.py`` holds what they share. Run each as ``python benchmarks/<subject>/<program>.py`` from the project root.
"""
