"""The GIL is released while C++ runs, Ctrl-C stops generation promptly, and stream() delivers
tokens as they are committed and stops when its consumer does."""

from __future__ import annotations

import _thread
import signal
import threading
import time

import pytest

import mtpspec

PROMPT = [5, 17, 42, 99, 3, 250, 7, 64]
LONG = 3000  # tokens: several seconds on the long glm_a (interrupted after 0.3 s)


class Counter(threading.Thread):
    """Counts loop iterations of pure Python code: it can only advance while it holds the GIL."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.count = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.count += 1


def test_generate_releases_the_gil(long_model: mtpspec.Model) -> None:
    counter = Counter()
    counter.start()
    try:
        time.sleep(0.2)
        # The counter's pace on its own over a short window ...
        before = counter.count
        time.sleep(0.1)
        pace = (counter.count - before) / 0.1
        # ... and while the main thread is inside one long C++ call.
        start_count, start = counter.count, time.perf_counter()
        result = long_model.generate(PROMPT, 800, stop_at_eos=False)
        seconds = time.perf_counter() - start
        progressed = counter.count - start_count
    finally:
        counter.stop.set()
        counter.join()
    assert len(result.tokens) == 800
    assert seconds > 0.3, f"the generation was too short ({seconds:.2f} s) to tell"
    # Holding the GIL would leave the counter at most one switch interval (5 ms) of progress at
    # each end of the call; released, it runs all along (if slowed by the C++ threads).
    assert progressed > 0.1 * pace * seconds and progressed > pace * 0.05, (progressed, pace, seconds)


@pytest.fixture(autouse=True)
def python_handles_sigint():
    """_thread.interrupt_main() does nothing while SIGINT is ignored, as it is in a job started in the
    background by a non-interactive shell; install Python's own handler for these tests."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def interrupt_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, _thread.interrupt_main)
    timer.start()
    return timer


def test_keyboard_interrupt_stops_generate(long_model: mtpspec.Model) -> None:
    timer = interrupt_after(0.3)
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        long_model.generate(PROMPT, LONG, stop_at_eos=False)
        time.sleep(30)  # only reached if the interrupt was not honoured inside generate
    elapsed = time.perf_counter() - start
    timer.join()
    assert elapsed < 1.5, f"KeyboardInterrupt took {elapsed:.2f} s"
    # The model still works and gives the same answer as before.
    assert long_model.generate(PROMPT, 20).tokens == long_model.generate(PROMPT, 20, draft="none").tokens


def test_keyboard_interrupt_stops_generate_with_a_hook(long_model: mtpspec.Model) -> None:
    def accept_none(target_probs, drafts, draft_probs):
        return 0, int(target_probs[0].argmax())

    timer = interrupt_after(0.3)
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        long_model.generate(PROMPT, LONG, stop_at_eos=False, acceptance_hook=accept_none)
        time.sleep(30)
    timer.join()
    assert time.perf_counter() - start < 1.5
    assert len(long_model.generate(PROMPT, 5).tokens) == 5


def test_keyboard_interrupt_stops_stream(long_model: mtpspec.Model) -> None:
    received = []
    timer = interrupt_after(0.3)
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        for token in long_model.stream(PROMPT, LONG, stop_at_eos=False):
            received.append(token)
        time.sleep(30)
    elapsed = time.perf_counter() - start
    timer.join()
    assert elapsed < 1.5 and 0 < len(received) < LONG
    assert not [t for t in threading.enumerate() if t.name == "mtpspec-stream"], "the worker thread was left running"


def test_stream_yields_the_generated_tokens(model: mtpspec.Model) -> None:
    expected = model.generate(PROMPT, 40, k=3, stop_at_eos=False)
    stream = model.stream(PROMPT, 40, k=3, stop_at_eos=False)
    got = []
    with pytest.raises(StopIteration) as done:
        while True:
            got.append(next(stream))
    assert got == expected.tokens
    result = done.value.value
    assert isinstance(result, mtpspec.GenerateResult) and result.tokens == expected.tokens
    assert result.stats.num_drafts == expected.stats.num_drafts


def test_closing_a_stream_stops_generation(long_model: mtpspec.Model) -> None:
    start = time.perf_counter()
    stream = long_model.stream(PROMPT, LONG, stop_at_eos=False)
    first = [next(stream) for _ in range(5)]
    stream.close()
    assert time.perf_counter() - start < 1.5
    assert len(first) == 5
    assert not [t for t in threading.enumerate() if t.name == "mtpspec-stream"]
    # Breaking out of a for loop closes the generator the same way.
    for i, _ in enumerate(long_model.stream(PROMPT, LONG, stop_at_eos=False)):
        if i == 3:
            break
    assert not [t for t in threading.enumerate() if t.name == "mtpspec-stream"]


def test_stream_reports_errors(model: mtpspec.Model) -> None:
    with pytest.raises(ValueError, match="k must be in"):
        list(model.stream(PROMPT, 10, k=-1))
    with pytest.raises(TypeError, match="on_tokens"):
        model.stream(PROMPT, 10, on_tokens=print)


def test_parallel_requests_on_one_model(model: mtpspec.Model) -> None:
    expected = model.generate(PROMPT, 30, stop_at_eos=False).tokens
    results = [None] * 4

    def run(i: int) -> None:
        results[i] = model.generate(PROMPT, 30, stop_at_eos=False).tokens

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 4
