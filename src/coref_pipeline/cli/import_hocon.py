"""``coref-pipeline import-hocon``: an entry of the original ``experiments.conf`` as a ``coref_train`` preset."""

from __future__ import annotations

import click

from coref_pipeline.cli import CommandError


@click.command(
    "import-hocon",
    short_help="an experiments.conf entry as a coref_train preset",
    help="An experiments.conf entry as a coref_train preset (YAML). CONF: the original experiments.conf "
    "(HOCON). NAME: the experiment, e.g. spanbert_large.",
)
@click.argument("conf")
@click.argument("name")
@click.option("--output", help="write the YAML here instead of printing it")
def import_hocon(conf: str, name: str, output: str | None) -> None:
    from coref_pipeline.files import atomic_write_text
    from coref_pipeline.models.config import ConfigError
    from coref_pipeline.original.hocon import import_experiment, preset_yaml

    try:
        preset, left_out = import_experiment(conf, name)
    except (OSError, KeyError, ValueError, ConfigError) as error:
        raise CommandError(error) from None
    text = preset_yaml(name, preset, left_out, conf)
    if output:
        try:
            atomic_write_text(output, text)
        except OSError as error:
            raise CommandError(error) from None
    else:
        click.echo(text, nl=False)
