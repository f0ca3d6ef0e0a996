"""Cloud Scheduler's cron dialect, which is narrower than what cronsim parses.

Cloud Scheduler takes five fields of numbers, ranges `a-b`, lists `a,b`, steps `*/n` and
`a-b/n`, month names JAN-DEC and day names SUN-SAT (0 or 7 is Sunday), and "does not
support L" (https://cloud.google.com/scheduler/docs/configuring/cron-job-schedules): an
expression it refuses (L, W, #, ?, @hourly, six fields) must be refused here too, or the
check passes locally and `terraform apply` fails. terraform/schedules.tf holds the same
pattern (cron_atoms, cron_field_template; tests/terraform compares the two).
"""

from __future__ import annotations

import re

ATOMS = (
    r"[0-5]?[0-9]",  # minute
    r"[01]?[0-9]|2[0-3]",  # hour
    r"0?[1-9]|[12][0-9]|3[01]",  # day of the month
    r"0?[1-9]|1[0-2]|JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC",  # month
    r"[0-7]|SUN|MON|TUE|WED|THU|FRI|SAT",  # day of the week
)
_ITEM = r"(?:\*(?:/[1-9][0-9]*)?|(?:@A)(?:-(?:@A)(?:/[1-9][0-9]*)?)?)"
FIELD_TEMPLATE = _ITEM + r"(?:," + _ITEM + r")*"
"""One field: items of `*`, `*/n`, a value, `a-b`, `a-b/n`, comma-separated; @A is the
field's atom."""
PATTERN = "^" + " ".join(FIELD_TEMPLATE.replace("@A", atom) for atom in ATOMS) + "$"
_COMPILED = re.compile(PATTERN)
_UNSUPPORTED = re.compile(r"[LW#?@]")


def problem(expr: str) -> str | None:
    """Why Cloud Scheduler would refuse `expr`, or None when it is in the dialect."""
    if _COMPILED.fullmatch(expr):
        return None
    found = _UNSUPPORTED.search(re.sub(r"[A-Z]{3}", "", expr))  # not the L of JUL
    detail = f" ({found.group(0)!r} is not supported)" if found else ""
    return (
        "Cloud Scheduler takes 5 space-separated fields of numbers, JAN-DEC / SUN-SAT, *,"
        f" ranges a-b, lists a,b and steps */n or a-b/n{detail}; see"
        " https://cloud.google.com/scheduler/docs/configuring/cron-job-schedules"
    )
