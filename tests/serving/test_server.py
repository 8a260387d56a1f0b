"""``coref-pipeline serve`` as a real process on the loopback address, called by a real HTTP client."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from coref_pipeline.serving.coref_model import CorefModel
from tests.models.tiny import save_tiny_models
from tests.paths import PROJECT_ROOT

CLIENTS, REQUESTS = 8, 25


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def text_of(client: int, request: int) -> str:
    return f"Person{client} met Ada{request} there. She gave Person{client} letter{request}, and he thanked her for it."


def wait_for_server(process: subprocess.Popen, url: str, seconds: float = 120) -> str:
    """``url`` once the server ``process`` answers ``/health``; a failure with its output if it stops or never does."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return url
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the server did not start:\n{process.stdout.read()[-3000:]}")
        time.sleep(0.3)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The tiny incremental model served on a free loopback port; yields its base URL and the model directory."""
    _, model_dir = save_tiny_models(tmp_path_factory.mktemp("models"))
    port = free_port()
    command = [sys.executable, "-m", "coref_pipeline", "serve", "--model", str(model_dir), "--port", str(port)]
    command += ["--precision", "32", "--device", "cpu", "--max-chars", "2000"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = wait_for_server(process, f"http://127.0.0.1:{port}")
    yield url, model_dir
    # Ctrl-C, as a user stops it: the server shuts down and the command ends, its prediction pool's idle worker
    # told to stop (a command that joined that thread first would wait on it for ever).
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0, process.stdout.read()[-3000:]


@pytest.mark.slow
def test_predict_answers_what_the_library_predicts(server):
    url, model_dir = server
    model = CorefModel.load(model_dir)
    text = text_of(1, 2)
    answer = httpx.post(f"{url}/predict", json={"text": text}, timeout=60)
    assert answer.status_code == 200
    assert answer.json() == {**model.predict(text, doc_key="0").to_dict()}
    assert answer.json()["clusters"], "the tiny model predicts no cluster here: the comparison would be empty"
    batch = httpx.post(f"{url}/predict", json={"texts": [text, text_of(2, 3)]}, timeout=60).json()
    assert [record["clusters"] for record in batch["results"]] == [
        [[list(span) for span in cluster] for cluster in model.predict(t).clusters] for t in (text, text_of(2, 3))
    ]
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ok" and health["model_type"] == "incremental"
    assert "/predict" in httpx.get(f"{url}/openapi.json").json()["paths"]


@pytest.mark.slow
def test_concurrent_clients_each_get_their_own_clusters(server):
    url, model_dir = server
    model = CorefModel.load(model_dir)
    expected = {
        (client, request): model.predict(text_of(client, request), doc_key="0").to_dict()
        for client in range(CLIENTS)
        for request in range(REQUESTS)
    }

    def client_session(client: int) -> list[tuple[int, int, int, list]]:
        with httpx.Client(timeout=120) as session:
            answers = []
            for request in range(REQUESTS):
                answer = session.post(f"{url}/predict", json={"text": text_of(client, request)})
                answers.append((client, request, answer.status_code, answer.json()))
            return answers

    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = [answer for session in pool.map(client_session, range(CLIENTS)) for answer in session]
    assert len(answers) == CLIENTS * REQUESTS
    assert all(status == 200 for _, _, status, _ in answers)
    # Each answer is its own text's whole record (the text, its words, clusters and mention strings): every text
    # differs, so an answer given to another request cannot pass; the mention strings differ from request to request.
    assert all(record == expected[client, request] for client, request, _, record in answers)
    assert len({record["text"] for record in expected.values()}) == CLIENTS * REQUESTS
    assert len({str(record["mention_strings"]) for record in expected.values()}) >= REQUESTS
    assert httpx.get(f"{url}/health").json()["status"] == "ok"


@pytest.mark.slow
def test_bad_input_gets_a_4xx_json_naming_the_fault_and_the_server_goes_on(server):
    url, _ = server
    cases = [
        ({"content": b"{not json"}, 400, "the body is not JSON"),
        ({"json": {"text": "   "}}, 422, "the text is empty"),
        ({"json": {}}, 422, 'give one of "text"'),
        ({"json": {"text": 3}}, 422, '"text" must be a string'),
        ({"json": {"texts": ["fine", ""]}}, 422, "text 1 is empty"),
        ({"json": {"text": "x" * 2001}}, 413, "this server takes at most 2000"),
        ({"json": {"text": "Ada met Bob.", "genre": "zz"}}, 422, "genre 'zz'"),
        ({"json": {"text": "Ada.", "colour": 1}}, 422, "unknown key(s) ['colour']"),
        ({"content": b"x" * 1_000_001}, 413, "this server takes at most 1000000"),
    ]
    for request, status, fault in cases:
        answer = httpx.post(f"{url}/predict", timeout=60, **request)
        assert answer.status_code == status, (request, answer.text)
        assert fault in answer.json()["error"], (request, answer.json())
    assert httpx.post(f"{url}/predict", json={"text": "Ada met Bob. She thanked him."}, timeout=60).status_code == 200


@pytest.mark.slow
def test_the_page_has_the_box_the_button_and_the_script(server):
    url, _ = server
    page = httpx.get(url).text
    assert '<textarea id="text"' in page and '<button id="go"' in page and 'fetch("predict"' in page


# The page in a real browser: Debian's Chromium and its driver (`apt-get install chromium chromium-driver`;
# .ci/run installs them and sets COREF_PIPELINE_REQUIRE_BROWSER=1, so that CI fails rather than skips without one).
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
CHROMEDRIVER = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
ARTIFACTS = PROJECT_ROOT / "test-artifacts"  # what a test keeps for a person to look at (ignored by git)


def headless_chromium():
    """A Selenium driver of a headless Chromium found on this machine, or a skip (a failure where one is required)."""
    binary = next((path for path in CHROMIUM if Path(path).is_file()), None)
    driver_path = next((path for path in CHROMEDRIVER if Path(path).is_file()), None)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        binary = None
    if binary is None or driver_path is None:
        reason = "no Chromium with its driver here: apt-get install chromium chromium-driver (and pip install selenium)"
        if os.environ.get("COREF_PIPELINE_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,700"):
        options.add_argument(argument)
    # The driver named: Selenium Manager (which would download one) is not consulted.
    return webdriver.Chrome(options=options, service=Service(executable_path=driver_path))


MENTIONS_SHOWN = """
return [...document.querySelectorAll('#result span.mention')].map(node => {
  const copy = node.cloneNode(true);
  copy.querySelectorAll('sub').forEach(label => label.remove());
  return [node.dataset.cluster, copy.textContent, getComputedStyle(node).backgroundColor];
});
"""


@pytest.mark.slow
def test_the_page_in_a_headless_browser_shows_the_clusters_of_a_pasted_text(server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    url, model_dir = server
    text = text_of(5, 7)
    expected = CorefModel.load(model_dir).predict(text)
    assert expected.char_clusters, "the tiny model predicts no cluster here: the page would show nothing"
    browser = headless_chromium()
    try:
        browser.get(url)
        box = browser.find_element(By.ID, "text")
        box.clear()
        box.send_keys(text)  # typed in, as a person pastes it
        browser.find_element(By.ID, "go").click()
        WebDriverWait(browser, 60).until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "#result span.mention"))
        )
        shown = browser.execute_script(MENTIONS_SHOWN)
        whole = browser.execute_script(
            "const copy = document.getElementById('result').cloneNode(true);"
            "copy.querySelectorAll('sub').forEach(label => label.remove()); return copy.textContent;"
        )
        ARTIFACTS.mkdir(exist_ok=True)
        screenshot = ARTIFACTS / "serve_page.png"
        assert browser.save_screenshot(str(screenshot))
        assert browser.find_element(By.ID, "error").text == ""
    finally:
        browser.quit()
    # Every mention of every cluster, with its cluster's number, and nothing else; the text as it was pasted.
    wanted = [
        (str(number + 1), text[start:end])
        for number, cluster in enumerate(expected.char_clusters)
        for start, end in cluster
    ]
    assert sorted((cluster, mention) for cluster, mention, _ in shown) == sorted(wanted)
    assert whole == text
    # One colour per cluster, a different one for each (up to the page's eight colours).
    colours = {cluster: {colour for c, _, colour in shown if c == cluster} for cluster, _, _ in shown}
    assert all(len(found) == 1 and "0, 0, 0, 0" not in next(iter(found)) for found in colours.values())
    assert len({next(iter(found)) for found in colours.values()}) == min(len(colours), 8)
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 5000


def test_the_server_predicts_a_text_before_it_answers_requests(tmp_path, monkeypatch):
    """The model predicts one short text on its thread while the server starts, so that what a first prediction
    loads (the word tokenizer's import, torch's first calls: seconds on a CPU) falls on no request."""
    import threading

    from coref_pipeline.serving.server import WARM_UP_TEXT, Predictor

    _, model_dir = save_tiny_models(tmp_path)
    calls = []
    original = CorefModel.predict_many

    def counted(self, documents, *args, **kwargs):
        documents = list(documents)
        calls.append(([document["text"] for document in documents], threading.current_thread().name))
        return original(self, documents, *args, **kwargs)

    monkeypatch.setattr(CorefModel, "predict_many", counted)
    predictor = Predictor(lambda: CorefModel.load(model_dir, for_prediction=True), str(model_dir))
    assert [texts for texts, _ in calls] == [[WARM_UP_TEXT]]
    assert calls[0][1].startswith("coref-model")  # on the model's own thread
    assert predictor.health()["status"] == "ok"


def test_requests_that_arrive_together_are_read_at_once_each_answered_alone(tmp_path, monkeypatch):
    """While the model's thread is busy, requests wait; then one ``predict_many`` reads all their texts, and each
    request gets its own texts' results, as alone; one whose text the model refuses gets its error, the others not."""
    import asyncio
    import threading

    from coref_pipeline.serving.batching import MAX_TOKENS_IN_BATCH
    from coref_pipeline.serving.server import Predictor, RequestError

    _, model_dir = save_tiny_models(tmp_path)
    predictor = Predictor(lambda: CorefModel.load(model_dir), str(model_dir), MAX_TOKENS_IN_BATCH)
    model = predictor.model
    calls = []
    original = type(model).predict_many

    def counted(self, documents, *args, **kwargs):
        documents = list(documents)
        calls.append(len(documents))
        return original(self, documents, *args, **kwargs)

    monkeypatch.setattr(type(model), "predict_many", counted)
    requests = [
        ([text_of(1, 1)], None),
        ([text_of(2, 1), text_of(2, 2)], None),
        (["Ada met Bob."], "zz"),
        ([text_of(3, 3)], "bc"),
    ]

    async def together():
        busy = threading.Event()
        predictor._thread.submit(busy.wait)  # the model's thread is busy: the requests wait
        pending = [asyncio.ensure_future(predictor.predict(texts, genre)) for texts, genre in requests]
        await asyncio.sleep(0.2)
        busy.set()
        return await asyncio.gather(*pending, return_exceptions=True)

    answers = asyncio.run(together())
    assert calls[0] == 5  # every waiting text in one read
    for (texts, genre), answer in zip(requests, answers, strict=True):
        if genre == "zz":
            assert isinstance(answer, RequestError) and answer.status == 422 and "genre 'zz'" in answer.message
            continue
        alone = [model.predict(text, genre=genre or "nw", doc_key=str(i)).to_dict() for i, text in enumerate(texts)]
        assert answer == alone
