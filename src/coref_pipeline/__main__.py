"""``python -m coref_pipeline`` runs the command-line interface."""

from coref_pipeline.cli import main

if __name__ == "__main__":
    main()
