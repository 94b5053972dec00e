"""A run's progress on stderr: tqdm's bar on a terminal; anywhere else (a log file, a pipe, CI) a bar's carriage
returns leave blank lines and lines of spaces, so a plain line is printed instead after the first step and then every
``every`` seconds: ``step 120/400: 15,300 samples/s, loss 0.4812, accuracy 0.8120, progressive AUC 0.7712``
(samples/s, mean loss and the means of the model's extra outputs since the line before; the AUC of the last
samples scored before training on them, computed only when a line is printed, or every ``every`` seconds on the
bar)."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, TextIO

PLAIN_EVERY_SECONDS = 30.0


class Progress:
    """Counts a fit's steps: :meth:`update` after each (with the fit's samples so far and the step's loss),
    :meth:`close` at the end. ``enabled=False`` prints nothing."""

    def __init__(
        self,
        total: Optional[int],
        enabled: bool,
        stream: Optional[TextIO] = None,
        every: float = PLAIN_EVERY_SECONDS,
        clock: Callable[[], float] = time.perf_counter,
        auc: Optional[Callable[[], Optional[float]]] = None,
    ) -> None:
        """``auc``: the progressive AUC now (a :class:`~xdl_ec.model.progressive.ProgressiveWindow`'s), shown when
        it is defined."""
        self.total, self.every, self.clock, self.auc = total, every, clock, auc
        self.stream = sys.stderr if stream is None else stream
        self._bar: Any = None
        self._plain = False
        if enabled:
            isatty = getattr(self.stream, "isatty", None)
            if isatty is not None and isatty():
                from tqdm import tqdm

                self._bar = tqdm(total=total, unit="step", dynamic_ncols=True, leave=False, file=self.stream)
            else:
                self._plain = True
        self.step = 0
        self._line_time = clock()
        self._line_samples = 0
        self._losses: List[float] = []
        self._outputs: Dict[str, List[float]] = {}

    def update(self, samples: int, loss: Optional[float], outputs: Optional[Mapping[str, float]] = None) -> None:
        """One more step; ``samples``: trained by this fit so far, ``loss``: the step's, ``outputs``: the model's
        extra scalar outputs at it (an accuracy), shown after the loss."""
        self.step += 1
        if self._bar is not None:
            self._bar.update(1)
            if self.auc is not None and (self.step == 1 or self.clock() - self._line_time >= self.every):
                self._line_time = self.clock()
                value = self.auc()
                if value is not None:
                    self._bar.set_postfix_str(f"progressive AUC {value:.4f}", refresh=False)
        if not self._plain:
            return
        if loss is not None:
            self._losses.append(float(loss))
        for name, value in (outputs or {}).items():
            self._outputs.setdefault(name, []).append(float(value))
        now = self.clock()
        if self.step > 1 and now - self._line_time < self.every:
            return
        of = "" if self.total is None else f"/{self.total:,}"
        parts = []
        if self.step > 1 and now > self._line_time:  # the first step's time is mostly start-up: no rate for it
            parts.append(f"{(samples - self._line_samples) / (now - self._line_time):,.0f} samples/s")
        if self._losses:
            parts.append(f"loss {sum(self._losses) / len(self._losses):.4f}")
        parts += [f"{name} {sum(values) / len(values):.4f}" for name, values in self._outputs.items()]
        value = None if self.auc is None else self.auc()
        if value is not None:
            parts.append(f"progressive AUC {value:.4f}")
        print(f"step {self.step:,}{of}: {', '.join(parts)}", file=self.stream, flush=True)
        self._line_time, self._line_samples, self._losses, self._outputs = now, samples, [], {}

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
