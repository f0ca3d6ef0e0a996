"""reclaim-client: your application's side of a reclaim queue, over its HTTP API.

from reclaim_client import Client
queue = Client("https://reclaim-submit-xyz.a.run.app")  # admin_url=...: cancel, retry, bulk
job = queue.submit("render", {"scene": 7})
print(queue.wait(job.id).result)
"""

from reclaim_client.client import Client
from reclaim_client.errors import (
    Conflict,
    Gone,
    InvalidRequest,
    NoAdminUrl,
    NotAllowed,
    NotFound,
    ReclaimError,
    RecordUnreadable,
    TooLarge,
    Unavailable,
    WaitTimeout,
)
from reclaim_client.models import (
    BatchProgress,
    BulkCount,
    BulkDone,
    Job,
    Output,
    Progress,
    Submitted,
)

__all__ = [
    "BatchProgress",
    "BulkCount",
    "BulkDone",
    "Client",
    "Conflict",
    "Gone",
    "InvalidRequest",
    "Job",
    "NoAdminUrl",
    "NotAllowed",
    "NotFound",
    "Output",
    "Progress",
    "ReclaimError",
    "RecordUnreadable",
    "Submitted",
    "TooLarge",
    "Unavailable",
    "WaitTimeout",
]
