"""``coref-pipeline serve --model DIR_OR_ID``: the JSON API and the page over one model
(``coref_pipeline.serving.server``)."""

from __future__ import annotations

import logging

import click

from coref_pipeline.cli import CommandError
from coref_pipeline.serving.server import MAX_CHARS, MAX_REQUEST_BYTES

logger = logging.getLogger(__name__)


@click.command("serve", short_help="serve a model over HTTP: POST /predict (JSON), GET /health, a page at /")
@click.option(
    "--model", "model_dir", required=True, help="a model directory, or a Hugging Face Hub model id (owner/name)"
)
@click.option("--revision", help="with a Hub model id: the branch, tag or commit to load (default: main)")
@click.option("--host", default="127.0.0.1", show_default=True, help="the address to listen on (0.0.0.0: every one)")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="the port to listen on")
@click.option(
    "--max-chars",
    type=click.IntRange(min=1),
    default=MAX_CHARS,
    show_default=True,
    help="the longest text accepted, in characters (413 above it)",
)
@click.option(
    "--max-request-bytes",
    type=click.IntRange(min=1),
    default=MAX_REQUEST_BYTES,
    show_default=True,
    help="the largest request body accepted (413 above it)",
)
@click.option(
    "--device", default="auto", show_default=True, help="auto (a GPU when there is one), cpu, cuda, cuda:N or mps"
)
@click.option(
    "--precision",
    type=click.Choice(["auto", "32", "bf16-mixed", "16-mixed"]),
    default="auto",
    show_default=True,
    help="inference precision, as predict's",
)
@click.option(
    "--batch-tokens",
    type=click.IntRange(min=0),
    default=None,
    help="requests that arrive together are read at once: the subtokens of one encoder pass over their texts' "
    "segments (0: one text at a time; default: 8192 on a GPU, 512 on a CPU)",
)
def serve(
    model_dir: str,
    revision: str | None,
    host: str,
    port: int,
    max_chars: int,
    max_request_bytes: int,
    device: str,
    precision: str,
    batch_tokens: int | None,
) -> None:
    import uvicorn

    from coref_pipeline.serving.coref_model import CorefModel
    from coref_pipeline.serving.server import Predictor, create_app

    try:  # loaded on the thread that will predict (serve.Predictor)
        predictor = Predictor(
            lambda: CorefModel.load(
                model_dir, device=device, precision=precision, revision=revision, for_prediction=True
            ),
            model_dir,
            batch_tokens,
        )
    except (OSError, ValueError, KeyError) as error:
        raise CommandError(error) from None
    app = create_app(predictor, max_chars=max_chars, max_request_bytes=max_request_bytes)
    model_type = predictor.model.model_type
    logger.info("Serving %s (%s) on http://%s:%d (the page at /, the API at /docs)", model_dir, model_type, host, port)
    uvicorn.run(app, host=host, port=port, log_level="info")
