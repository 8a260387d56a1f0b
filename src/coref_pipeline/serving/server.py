"""``coref-pipeline serve``'s application: a JSON API over one model, and a page that shows the clusters.

FastAPI (with its OpenAPI schema at ``/openapi.json`` and ``/docs``) served by uvicorn:

* ``POST /predict``: ``{"text": "...", "genre": "nw"}`` or ``{"texts": ["...", ...]}``; the answer is
  ``CorefResult.to_dict`` (the record ``coref-pipeline predict`` writes), or ``{"results": [...]}``;
* ``GET /health``: ``{"status": "ok", ...}``, which model and its limits;
* ``GET /``: a page where one pastes a text and sees its clusters coloured in place.

Bad input is a 4xx JSON ``{"error": "..."}`` naming the fault: a body that is not JSON (400), a
request without a text or with an empty one (422), a body over ``max_request_bytes`` (413), a text
over ``max_chars`` or over the baseline's own length limit (413, the limit named). The model runs on a
thread of its own (``Predictor``): requests that arrive while it is busy are read together, many documents at
once, each answered with its own documents' clusters; ``/health`` answers meanwhile.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations (``Request``) at run time.
import asyncio
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from coref_pipeline.serving.coref_model import CorefModel, DocumentTooLongError
from coref_pipeline.serving.inputs import InputFormatError

logger = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1_000_000  # the largest request body accepted (413 above it)
MAX_CHARS = 100_000  # the longest text accepted, in characters (413 above it)
MAX_TEXTS = 64  # the most texts in one request


class RequestError(Exception):
    """A request the server refuses: its HTTP status and the one-line reason sent back."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def parse_request(body: bytes, max_chars: int) -> tuple[list[str], str | None, bool]:
    """The texts of a ``/predict`` body, its genre, and whether it was a batch; a bad body is a
    :class:`RequestError`."""
    try:
        request = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RequestError(400, f"the body is not JSON: {error}") from None
    if not isinstance(request, dict):
        raise RequestError(422, 'the body must be a JSON object: {"text": "..."} or {"texts": ["...", ...]}')
    unknown = sorted(set(request) - {"text", "texts", "genre"})
    if unknown:
        raise RequestError(422, f"unknown key(s) {unknown}; known: text, texts, genre")
    if ("text" in request) == ("texts" in request):
        raise RequestError(422, 'give one of "text" (a string) or "texts" (a list of strings)')
    batch = "texts" in request
    texts = request["texts"] if batch else [request["text"]]
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise RequestError(422, '"texts" must be a list of strings' if batch else '"text" must be a string')
    if batch and not 1 <= len(texts) <= MAX_TEXTS:
        raise RequestError(422 if not texts else 413, f'"texts" must hold 1 to {MAX_TEXTS} texts, got {len(texts)}')
    for index, text in enumerate(texts):
        where = f"text {index}" if batch else "the text"
        if not text.strip():
            raise RequestError(422, f"{where} is empty")
        if len(text) > max_chars:
            raise RequestError(413, f"{where} has {len(text)} characters; this server takes at most {max_chars}")
    genre = request.get("genre")
    if genre is not None and not isinstance(genre, str):
        raise RequestError(422, '"genre" must be a string')
    return texts, genre, batch


WARM_UP_TEXT = "Ada met Charles in 1833. He showed her his engine."


class Predictor:
    """The model on one thread of its own: loaded there, and every prediction made there, the first before the
    server listens (``WARM_UP_TEXT``), so that no request waits for what a first prediction loads: the word
    tokenizer's import and torch's first calls, 1.7 s of a first request that then took 0.02 s
    (``benchmarks/serving/serve.py``).

    One thread: torch's CPU thread pool belongs to the thread that calls it, and a second calling thread brings
    a second pool that competes with the first for the cores (measured: predictions 15-20% slower, in every
    thread, once two threads had predicted). Requests that arrive while the model is busy wait together, and the
    model then reads all their texts at once (``CorefModel.predict_many``: grouped by length, the segments of a
    group through the encoder together, ``max_tokens_in_batch`` subtokens a pass; None: the device's default,
    ``CorefModel.batch_tokens``), each request answered with its own texts' clusters, in fp32 those of alone but
    where float32's rounding tips a near tie.
    """

    def __init__(self, load: Callable[[], CorefModel], source: str, max_tokens_in_batch: int | None = None) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coref-model")
        self.model = self._thread.submit(load).result()
        self.source = source
        self.max_tokens_in_batch = max_tokens_in_batch
        self._waiting: list[tuple[list[str], str | None, Future]] = []
        self._lock = threading.Lock()
        self._thread.submit(self._predict_together, [([WARM_UP_TEXT], None)]).result()

    async def predict(self, texts: list[str], genre: str | None) -> list[dict[str, Any]]:
        """Each text's ``CorefResult.to_dict``, predicted on the model's thread with the requests waiting beside it,
        awaited without blocking the server's other requests."""
        answer: Future = Future()
        with self._lock:
            self._waiting.append((texts, genre, answer))
        self._thread.submit(self._answer_waiting)
        return await asyncio.wrap_future(answer)

    def _answer_waiting(self) -> None:
        """On the model's thread: every request waiting now, predicted together (one that fails alone is
        answered alone, so that its error is its own)."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
        if not waiting:
            return  # an earlier call answered these requests
        try:
            answers = self._predict_together([(texts, genre) for texts, genre, _ in waiting])
        except RequestError:
            for texts, genre, answer in waiting:
                try:
                    answer.set_result(self._predict_together([(texts, genre)])[0])
                except RequestError as error:
                    answer.set_exception(error)
            return
        except Exception as error:  # a bug: every waiting request sees it (the server logs it as a 500)
            for _, _, answer in waiting:
                answer.set_exception(error)
            return
        for (_, _, answer), results in zip(waiting, answers, strict=True):
            answer.set_result(results)

    def _predict_together(self, requests: list[tuple[list[str], str | None]]) -> list[list[dict[str, Any]]]:
        """The results of several requests' texts, read by the model at once, split back by request."""
        default = self.model.config.default_genre
        records = [
            {"text": text, "genre": genre or default, "doc_key": str(index)}
            for texts, genre in requests
            for index, text in enumerate(texts)
        ]
        try:
            results = list(
                self.model.predict_many(records, progress=False, max_tokens_in_batch=self.max_tokens_in_batch)
            )
        except DocumentTooLongError as error:
            raise RequestError(413, str(error)) from None
        except InputFormatError as error:  # an unknown genre
            raise RequestError(422, str(error)) from None
        answers, start = [], 0
        for texts, _ in requests:
            answers.append([result.to_dict() for result in results[start : start + len(texts)]])
            start += len(texts)
        return answers

    def health(self) -> dict[str, Any]:
        config = self.model.config
        return {
            "status": "ok",
            "model": self.source,
            "model_type": self.model.model_type,
            "genres": list(config.genres),
            "max_inference_subtokens": getattr(config, "max_inference_subtokens", None),
        }


def create_app(predictor: Predictor, max_chars: int = MAX_CHARS, max_request_bytes: int = MAX_REQUEST_BYTES) -> Any:
    """The FastAPI application over ``predictor``."""
    from fastapi import FastAPI, Request
    from fastapi.responses import HTMLResponse, JSONResponse

    app = FastAPI(
        title="coref-pipeline",
        description='Coreference clusters of a text: POST /predict with {"text": ...} or {"texts": [...]}.',
    )

    def refused(error: RequestError) -> JSONResponse:
        return JSONResponse({"error": error.message}, status_code=error.status)

    def too_large(size: int | str) -> JSONResponse:
        return refused(RequestError(413, f"the body has {size} bytes; this server takes at most {max_request_bytes}"))

    @app.middleware("http")
    async def bounded_body(request: Request, call_next: Any) -> Any:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_request_bytes:
            return too_large(length)
        return await call_next(request)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return predictor.health()

    @app.post(
        "/predict",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "text": {"type": "string"},
                                "texts": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_TEXTS},
                                "genre": {"type": "string"},
                            },
                        }
                    }
                },
            }
        },
    )
    async def predict(request: Request) -> Any:
        body = await request.body()
        if len(body) > max_request_bytes:  # a body sent without a length
            return too_large(len(body))
        try:
            texts, genre, batch = parse_request(body, max_chars)
            results = await predictor.predict(texts, genre)
        except RequestError as error:
            return refused(error)
        return {"results": results} if batch else results[0]

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return PAGE

    return app


# The page: a text box, a button, the text with each cluster's mentions coloured (as predict --html colours them).
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>coref-pipeline</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }
textarea { width: 100%; height: 10rem; font: inherit; }
#result { white-space: pre-wrap; line-height: 2; margin-top: 1rem; }
.mention { border-radius: 3px; padding: 0 2px; }
.mention sub { font-size: 0.7em; font-weight: bold; }
#error { color: #b00020; }
</style></head>
<body>
<h1>coref-pipeline</h1>
<p>Paste a text and press the button: each cluster's mentions get one colour and its number.</p>
<textarea id="text" aria-label="text">Ada Lovelace wrote to Charles Babbage. She had read his notes on the engine, and he answered her the next day.</textarea>
<p><button id="go" type="button">Find the clusters</button> <span id="error" role="alert"></span></p>
<div id="result" aria-live="polite"></div>
<script>
const colours = ["#ffd6a5", "#caffbf", "#9bf6ff", "#bdb2ff", "#ffc6ff", "#fdffb6", "#a0c4ff", "#ffadad"];
function render(record) {
  const text = record.text, marks = [];
  record.char_clusters.forEach((cluster, number) =>
    cluster.forEach(([start, end]) => marks.push({start, end, number})));
  marks.sort((a, b) => a.start - b.start || b.end - a.end);
  const out = document.getElementById("result");
  out.textContent = "";
  let position = 0;
  const open = [];
  function text_until(stop) {
    if (stop > position) {
      (open.length ? open[open.length - 1].node : out).append(text.slice(position, stop));
      position = stop;
    }
  }
  function close_until(stop) {
    while (open.length && open[open.length - 1].end <= stop) {
      const done = open[open.length - 1]; text_until(done.end); open.pop();
      const label = document.createElement("sub"); label.textContent = String(done.number + 1); done.node.append(label);
    }
  }
  for (const mark of marks) {
    close_until(mark.start); text_until(mark.start);
    const node = document.createElement("span");
    node.className = "mention"; node.dataset.cluster = String(mark.number + 1);
    node.style.background = colours[mark.number % colours.length];
    (open.length ? open[open.length - 1].node : out).append(node);
    open.push({node, end: mark.end, number: mark.number});
  }
  close_until(Infinity); text_until(text.length);
}
document.getElementById("go").addEventListener("click", async () => {
  const error = document.getElementById("error");
  error.textContent = "";
  const response = await fetch("predict", {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({text: document.getElementById("text").value})});
  const record = await response.json();
  if (!response.ok) { error.textContent = record.error; return; }
  render(record);
});
</script>
</body></html>
"""  # noqa: E501 (the textarea's example text is one line of the page)
