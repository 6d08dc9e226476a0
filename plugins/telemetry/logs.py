"""``log_format = "json"``: one JSON object per line, the fields :func:`kernel.log_fields` gives;
and a debug line per run, the run's own context on it."""

from __future__ import annotations

import logging
import time

import msgspec

from kernel import ModelCall, Observer, RunFacts, RunOutcome, log_fields

_encode = msgspec.json.Encoder().encode


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON (a newline in a message is escaped, never raw)."""

    def format(self, record: logging.LogRecord) -> str:
        return _encode(log_fields(record)).decode()


class RunLog(Observer):
    """A debug line at the end of each run (outcome, time, tokens), logged from the run's own
    task, so it carries the run's session, run, transport and trace id like every line."""

    def __init__(self) -> None:
        self.log = logging.getLogger("gateway.runs")

    def model_call_ended(self, run: RunFacts, call: ModelCall) -> None:
        if self.log.isEnabledFor(logging.DEBUG):
            spent = run.slots.get("runlog", (0, 0))
            run.slots["runlog"] = (spent[0] + call.usage.input_tokens, spent[1] + call.usage.output_tokens)

    def run_ended(self, run: RunFacts, outcome: RunOutcome, error_code: str | None) -> None:
        if self.log.isEnabledFor(logging.DEBUG):
            tokens_in, tokens_out = run.slots.pop("runlog", (0, 0))
            took = time.perf_counter() - run.started
            why = f" ({error_code})" if error_code else ""
            self.log.debug("run %s %s%s in %.3fs, %d tokens in, %d out", run.run_id, outcome, why, took, tokens_in, tokens_out)
