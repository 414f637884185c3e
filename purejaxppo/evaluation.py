"""Trained agents as policies, and their evaluation on fresh episodes.

`evaluate` (also at the top level) scores parameters; `policy_of` wraps one agent's
parameters as a plain callable `Policy`; `EvalResult` is what `evaluate` returns.
"""

from ._evaluate import EvalResult as EvalResult
from ._evaluate import Policy as Policy
from ._evaluate import evaluate as evaluate
from ._evaluate import policy_of as policy_of
